// ModelVersion's request path: a request checked and turned into a job (Prepare), queued
// (Enqueue), and a batch of jobs run on an instance (Execute: inputs gathered, the engine
// run, outputs split into responses, the execution recorded).
#include <algorithm>
#include <cstring>
#include <set>

#include "base/tensor_rows.h"
#include "server/core/model_version.h"
#include "server/core/model_version_internal.h"
#include "server/core/parallel_copy.h"
#include "server/repository/repository.h"

namespace sampan::server {

using Clock = std::chrono::steady_clock;
using internal::Dims;
using internal::DimsText;
using internal::InputNames;
using internal::Ns;
using internal::Resolve;

// ---------------------------------------------------------------- Prepare, Enqueue

Result<std::unique_ptr<InferJob>> ModelVersion::Prepare(InferRequest& r) {
  const std::string model = "model '" + name() + "'";  // (plain appends: this runs on every request)
  auto job = std::make_unique<InferJob>();
  const int64_t max_batch = config_.max_batch_size();
  int64_t batch = -1;
  std::string batch_from;
  std::set<std::string> seen;
  for (auto& in : r.inputs) {
    auto ci = std::find_if(config_.input().begin(), config_.input().end(),
                           [&](const auto& c) { return c.name() == in.name; });
    if (ci == config_.input().end())
      return InvalidArgument("unexpected inference input '", in.name, "' for ", model,
                             " (its inputs: ", InputNames(config_), ")");
    if (!seen.insert(in.name).second) return InvalidArgument("input '", in.name, "' appears more than once");
    const DType expected = DTypeFromConfig(ci->data_type());
    if (in.dtype != expected)
      return InvalidArgument("input '", in.name, "' of ", model, " has datatype ",
                             in.dtype == DType::kUndefined ? "(none)" : KServeDatatype(in.dtype), ", expected ",
                             KServeDatatype(expected));
    std::vector<int64_t> dims = Dims(*ci);
    std::vector<int64_t> full = dims;
    if (batching_) full.insert(full.begin(), -1);
    bool shape_ok = in.shape.size() == full.size();
    for (size_t i = 0; shape_ok && i < full.size(); ++i)
      shape_ok = in.shape[i] >= 0 && (full[i] < 0 || in.shape[i] == full[i]);
    if (!shape_ok)
      return InvalidArgument("input '", in.name, "' of ", model, " has shape ", ShapeToString(in.shape), ", expected ",
                             DimsText(full),
                             batching_ ? StrCat(" (the first dimension is the batch, 1..", max_batch, ")") : "");
    if (Status st = CheckShape(in.shape); !st.ok()) return st.WithContext(StrCat("input '", in.name, "'"));
    if (batching_) {
      const int64_t b = in.shape[0];
      if (b < 1 || b > max_batch)
        return InvalidArgument("input '", in.name, "' of ", model, " has batch size ", b, ", expected 1..", max_batch,
                               " (max_batch_size)");
      if (batch >= 0 && b != batch)
        return InvalidArgument("input '", in.name, "' has batch size ", b, " but input '", batch_from, "' has ", batch);
      batch = b, batch_from = in.name;
    }
    if (!in.data.defined()) return InvalidArgument("input '", in.name, "' has no data");
    const size_t need = static_cast<size_t>(NumElements(in.shape)) * DTypeSize(in.dtype);
    if (in.dtype == DType::kString && (in.data.dtype() != in.dtype || in.data.numel() != NumElements(in.shape)))
      return InvalidArgument("input '", in.name, "' of ", model, ": got ", in.data.numel(),
                             " BYTES elements, but shape ", ShapeToString(in.shape), " holds ", NumElements(in.shape));
    if (in.dtype != DType::kString && (in.data.dtype() != in.dtype || in.data.nbytes() != need))
      return InvalidArgument("input '", in.name, "' of ", model, ": got ", in.data.nbytes(), " bytes of data, but ",
                             KServeDatatype(in.dtype), " shape ", ShapeToString(in.shape), " needs ", need, " bytes");
    Tensor t = in.data.shape() == in.shape ? in.data : in.data.Reshaped(in.shape);
    if (ci->has_reshape()) {
      std::vector<int64_t> target(ci->reshape().shape().begin(), ci->reshape().shape().end());
      const int64_t rows = batching_ ? in.shape[0] : 1;
      auto resolved = Resolve(target, NumElements(in.shape) / std::max<int64_t>(rows, 1));
      if (!resolved)
        return InvalidArgument("input '", in.name, "' of ", model, ": shape ", ShapeToString(in.shape),
                               " cannot be reshaped to the model's ", DimsText(target));
      if (batching_) resolved->insert(resolved->begin(), rows);
      t = t.Reshaped(*resolved);
    }
    job->inputs[in.name] = std::move(t);
  }
  for (const auto& ci : config_.input())
    if (!ci.optional() && !seen.count(ci.name()))
      return InvalidArgument("input '", ci.name(), "' of ", model,
                             " is missing from the request (expected inputs: ", InputNames(config_), ")");
  // Jobs batch together only when every non-batch dimension matches (and the same inputs are present).
  if (batching_)
    for (const auto& ci : config_.input()) {
      auto it = job->inputs.find(ci.name());
      if (it == job->inputs.end()) {
        job->shape_key += "-;";
        continue;
      }
      Shape s = it->second.shape();
      s.erase(s.begin());
      job->shape_key += ShapeToString(s) + ";";
    }
  if (r.outputs.empty()) {
    for (int i = 0; i < config_.output_size(); ++i) job->outputs.push_back(i);
  } else {
    for (const auto& o : r.outputs) {
      int found = -1;
      for (int i = 0; i < config_.output_size(); ++i)
        if (config_.output(i).name() == o) found = i;
      if (found < 0) {
        std::string names;
        for (const auto& c : config_.output()) names += (names.empty() ? "" : ", ") + c.name();
        return InvalidArgument("unexpected inference output '", o, "' for ", model, " (its outputs: ", names, ")");
      }
      job->outputs.push_back(found);
    }
  }
  job->rows = batching_ ? batch : 1;
  if (config_.model_transaction_policy().decoupled() && std::strcmp(r.protocol, "grpc-stream") != 0)
    return Unsupported(model,
                       " is decoupled (model_transaction_policy): its responses stream over gRPC's "
                       "ModelStreamInfer only");
  if (sequence_) {
    if (!r.sequence.given())
      return InvalidArgument(model,
                             " is a sequence model: the request needs a sequence_id (a nonzero correlation "
                             "ID), with sequence_start on the first request of the sequence");
    if (batching_ && batch != 1)
      return InvalidArgument(model,
                             " is a sequence model: each request is one step of one sequence, batch size 1 "
                             "(got ",
                             batch, ")");
    SP_ASSIGN_OR_RETURN(job->sequence, sequence_->SequenceKey(r.sequence, model));
    job->sequence_start = r.sequence.start;
    job->sequence_end = r.sequence.end;
  } else if (ensemble_ && !ensemble_->sequence_model().empty()) {
    // Forwarded to the sequence-model steps (Ensemble::Run): checked here, before any step runs.
    if (!r.sequence.given())
      return InvalidArgument(
          model, " forwards its requests to sequence model '", ensemble_->sequence_model(),
          "': the request needs a sequence_id (a nonzero correlation ID), with sequence_start on the "
          "first request of the sequence");
    if (batching_ && batch != 1)
      return InvalidArgument(model, " forwards its requests to sequence model '", ensemble_->sequence_model(),
                             "': each request is one step of one sequence, batch size 1 (got ", batch, ")");
  } else if (r.sequence.any()) {
    return InvalidArgument(model, " is not a sequence model (its config has no sequence_batching",
                           ensemble_ ? " and none of its steps' models has" : "",
                           "): sequence_id, sequence_start and sequence_end are for sequence models");
  }
  job->priority = r.priority;
  job->timeout_us = r.timeout_us;
  job->received = r.received;
  job->cancelled = r.cancelled;
  return job;
}

Status ModelVersion::Enqueue(std::unique_ptr<InferJob> job, scheduler::JobPtr* refused, scheduler::InlineRun* run) {
  if (ensemble_) {
    RunEnsemble(std::move(job));
    return Status::Ok();
  }
  if (sequencer_ && !sequence_) {
    // (A sequence model's jobs take theirs when they execute: one waiting in the backlog for a
    // slot must not hold back the answers of the sequences that run.)
    // Every ticket is answered exactly once (InferJob guarantees it), so the
    // sequence never stalls: refused and failed jobs take their turn too.
    const uint64_t ticket = sequencer_->Ticket();
    job->done = [seq = sequencer_, ticket, inner = std::move(job->done)](Result<InferResponse> r) mutable {
      seq->Complete(ticket, std::move(r), std::move(inner));
    };
  }
  return scheduler_->Enqueue(std::move(job), refused, run);
}

void ModelVersion::Drain() {
  if (scheduler_) scheduler_->Stop();
  metrics_->pending.Set(0);
}

// ---------------------------------------------------------------- Execute

void ModelVersion::Execute(int instance, std::vector<scheduler::JobPtr>& batch) {
  // --rate-limit=execution_count: wait for the instance group's resources (counted as queue time).
  InstanceRateLimiter::Grant grant;
  if (rate_limited_) grant = rate_limited_->Acquire(instance);
  const auto start = Clock::now();
  std::vector<InferJob*> jobs;
  std::vector<std::unique_ptr<InferJob>> fillers;  // idle sequence slots (null entries)
  int64_t total = 0, served = 0;
  for (auto& j : batch) {
    auto* job = static_cast<InferJob*>(j.get());
    if (job != nullptr) {
      job->queue_ns = Ns(start - job->enqueued);
      if (sequence_) sequence_->AddInputs(*job);
      if (sequence_ && sequencer_) {  // oldest { preserve_ordering }: in the order they execute
        const uint64_t ticket = sequencer_->Ticket();
        job->done = [seq = sequencer_, ticket, inner = std::move(job->done)](Result<InferResponse> r) mutable {
          seq->Complete(ticket, std::move(r), std::move(inner));
        };
      }
      served += job->rows;
    }
    jobs.push_back(job);
    total += job != nullptr ? job->rows : 1;
  }
  auto fail_all = [&](const Status& s) {
    for (auto* job : jobs)
      if (!job->filler) job->Fail(s);
  };
  if (served < total) {
    const InferJob* like = *std::find_if(jobs.begin(), jobs.end(), [](const InferJob* j) { return j != nullptr; });
    auto filler_inputs = sequence_->FillerInputs(*like);
    for (auto*& job : jobs) {
      if (job != nullptr) continue;
      fillers.push_back(std::make_unique<InferJob>());
      job = fillers.back().get();
      job->filler = true;
      if (filler_inputs.ok()) job->inputs = *filler_inputs;
    }
    if (!filler_inputs.ok()) {
      fail_all(filler_inputs.status().WithContext(StrCat("model '", name(), "': an idle sequence slot")));
      return;
    }
  }

  const int64_t padded = batching_ ? PaddedRows(total) : total;
  std::map<std::string, Tensor> inputs = GatherInputs(instance, jobs, total, padded);
  const auto t_in = Clock::now();
  auto run = contexts_[static_cast<size_t>(instance)]->Run(inputs);
  const auto t_run = Clock::now();
  if (!run.ok()) {
    for (auto* job : jobs) job->input_ns = Ns(t_in - start), job->infer_ns = Ns(t_run - t_in);
    fail_all(run.status().WithContext(StrCat("model '", name(), "' version ", version_)));
    return;
  }
  auto responses = SplitOutputs(jobs, run.value(), total, padded);
  if (!responses.ok()) {
    fail_all(responses.status());
    return;
  }
  const auto t_out = Clock::now();
  const uint64_t in_ns = Ns(t_in - start), infer_ns = Ns(t_run - t_in), out_ns = Ns(t_out - t_run);
  grant.Release();  // before the answers: their callbacks run on this thread
  RecordExecution(instance, served, total, in_ns, infer_ns, out_ns);
  if (metrics_->batch_buckets)
    metrics_->batch_buckets
        ->counter({{"model", name()}, {"version", version_string_}, {"bucket", std::to_string(padded)}})
        .Increment();
  for (size_t j = 0; j < jobs.size(); ++j) {
    jobs[j]->input_ns = in_ns, jobs[j]->infer_ns = infer_ns, jobs[j]->output_ns = out_ns;
    jobs[j]->Succeed(std::move((*responses)[j]));
  }
}

// One job passes its tensors through; a batch is concatenated along dim 0 (one copy, into
// memory the instance's engine reads fastest: pinned for cuda), with zero rows up to `padded`.
std::map<std::string, Tensor> ModelVersion::GatherInputs(int instance, const std::vector<InferJob*>& jobs,
                                                         int64_t total, int64_t padded) {
  if (jobs.size() == 1 && padded == total) return jobs[0]->inputs;
  std::map<std::string, Tensor> inputs;
  for (const auto& [name, first] : jobs[0]->inputs) {
    Shape shape = first.shape();
    shape[0] = padded;
    if (first.is_string()) {  // elements are objects: copied one by one; padding rows are ""
      Tensor t = Tensor::Alloc(DType::kString, shape);
      std::string* dst = t.mutable_strings();
      for (auto* job : jobs) {
        const Tensor& src = job->inputs.at(name);
        for (int64_t i = 0; i < src.numel(); ++i) *dst++ = src.strings()[i];
      }
      inputs.emplace(name, std::move(t));
      continue;
    }
    Tensor t = contexts_[static_cast<size_t>(instance)]->AllocateHostInput(first.dtype(), shape);
    auto* dst = static_cast<char*>(t.mutable_raw());
    std::vector<CopySpan> spans;
    spans.reserve(jobs.size());
    for (auto* job : jobs) {
      const Tensor& src = job->inputs.at(name);
      spans.push_back({dst, src.raw(), src.nbytes()});
      dst += src.nbytes();
    }
    ParallelCopy(spans);
    const size_t used = static_cast<size_t>(dst - static_cast<char*>(t.mutable_raw()));
    if (t.nbytes() > used) std::memset(dst, 0, t.nbytes() - used);
    inputs.emplace(name, std::move(t));
  }
  return inputs;
}

// Each job's rows of the outputs it asked for, without copying (slices share the batch's
// storage); a sequence job's state outputs are kept for its next request.
Result<std::vector<InferResponse>> ModelVersion::SplitOutputs(const std::vector<InferJob*>& jobs,
                                                              const std::vector<Tensor>& outs, int64_t total,
                                                              int64_t padded) const {
  std::vector<InferResponse> responses(jobs.size());
  const bool split = jobs.size() > 1 || padded != total;
  int64_t offset = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    InferJob* job = jobs[j];
    InferResponse& resp = responses[j];
    if (job->filler) {
      offset += job->rows;
      continue;
    }
    resp.model_name = name();
    resp.model_version = version_string_;
    resp.id = job->request.id;
    resp.decoupled = config_.model_transaction_policy().decoupled();
    for (int oi : job->outputs) {
      const auto& co = config_.output(oi);
      const size_t gi = static_cast<size_t>(output_index_[static_cast<size_t>(oi)]);
      if (gi >= outs.size())
        return Internal("model '", name(), "': the engine returned ", outs.size(), " outputs, expected output '",
                        co.name(), "' at ", gi);
      const Tensor& full = outs[gi];
      Tensor slice = full;
      if (split) {
        if (full.rank() < 1 || full.dim(0) != padded)
          return Internal("model '", name(), "': output '", co.name(), "' has shape ", ShapeToString(full.shape()),
                          ", which does not split into a batch of ", padded);
        slice = RowSlice(full, offset, job->rows);
      }
      if (co.has_reshape()) {
        std::vector<int64_t> dims = Dims(co);
        if (batching_) dims.insert(dims.begin(), job->rows);
        if (auto s = Resolve(dims, slice.numel())) slice = slice.Reshaped(*s);
      }
      InferTensor t;
      t.name = co.name();
      t.dtype = slice.dtype();
      t.shape = slice.shape();
      t.data = std::move(slice);
      resp.outputs.push_back(std::move(t));
    }
    if (resp.decoupled && !resp.outputs.empty() && !resp.outputs[0].shape.empty())
      job->response_rows = resp.outputs[0].shape[0];
    offset += job->rows;
  }
  // The sequences' next states, once every output split (a failed batch leaves them as they were).
  if (sequence_) {
    offset = 0;
    for (InferJob* job : jobs) {
      if (!job->filler) SP_RETURN_IF_ERROR(sequence_->SaveState(*job, outs, offset, split));
      offset += job->rows;
    }
  }
  return responses;
}

// Statistics and metrics of one execution: `served` rows of requests in a batch of `total`
// (idle sequence rows included; padding not).
void ModelVersion::RecordExecution(int instance, int64_t served, int64_t total, uint64_t in_ns, uint64_t infer_ns,
                                   uint64_t out_ns) {
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.inference_count += static_cast<uint64_t>(served);
    stats_.execution_count += 1;
    BatchStat& b = batch_stats_[static_cast<uint64_t>(total)];
    b.batch_size = static_cast<uint64_t>(total);
    b.compute_input.count++, b.compute_input.ns += in_ns;
    b.compute_infer.count++, b.compute_infer.ns += infer_ns;
    b.compute_output.count++, b.compute_output.ns += out_ns;
  }
  metrics_->count.Increment(static_cast<double>(served));
  metrics_->exec_count.Increment(1);
  DeviceMetrics& dm = *device_metrics_[instance_engine_[static_cast<size_t>(instance)]];
  dm.count.Increment(static_cast<double>(served));
  dm.exec_count.Increment(1);
}

}  // namespace sampan::server
