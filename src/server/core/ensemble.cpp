#include "server/core/ensemble.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <set>

#include "base/tensor_rows.h"
#include "server/repository/repository.h"

namespace sampan::server {

namespace sc = ::sampan::serverconfig;

namespace {

// A tensor of the DAG as the model that makes it (or the ensemble input) declares it.
struct TensorInfo {
  DType dtype = DType::kUndefined;
  std::vector<int64_t> dims;  //!< with the batch dim (-1) when that model batches
  std::string from;           //!< "ensemble input 'x'", "output 'y' of step 1 (model 'det')"
};

template <class T>
std::vector<int64_t> FullDims(const T& t, bool batching) {
  std::vector<int64_t> d;
  if (batching) d.push_back(-1);
  d.insert(d.end(), t.dims().begin(), t.dims().end());
  return d;
}

bool Compatible(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] >= 0 && b[i] >= 0 && a[i] != b[i]) return false;
  return true;
}

std::string DimsText(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += StrCat(i ? "," : "", d[i]);
  return s + "]";
}

std::string TypeText(DType t) {
  const char* k = KServeDatatype(t);
  return *k ? k : DTypeName(t);
}

template <class List>
std::string Names(const List& list) {
  std::string s;
  for (const auto& t : list) s += (s.empty() ? "" : ", ") + t.name();
  return s;
}

// The parts' rows one after the other; the parts agree on type and on every dim but the first.
Result<Tensor> ConcatRows(const std::vector<Tensor>& parts) {
  if (parts.size() == 1) return parts[0];
  const Tensor& first = parts[0];
  Shape shape = first.shape();
  shape[0] = 0;
  for (const Tensor& p : parts) {
    if (p.dtype() != first.dtype() || p.rank() != first.rank() ||
        !std::equal(p.shape().begin() + 1, p.shape().end(), first.shape().begin() + 1))
      return Internal("the answers to the rows' requests do not agree: ", first.Describe(), " and ", p.Describe(),
                      " (an output must have the same shape past its batch dim for every row)");
    shape[0] += p.dim(0);
  }
  if (first.is_string()) {
    std::vector<std::string> all;
    all.reserve(static_cast<size_t>(NumElements(shape)));
    for (const Tensor& p : parts) all.insert(all.end(), p.strings(), p.strings() + p.numel());
    return Tensor::FromStrings(std::move(all), std::move(shape));
  }
  Tensor out = Tensor::Alloc(first.dtype(), std::move(shape));
  auto* dst = static_cast<uint8_t*>(out.mutable_raw());
  for (const Tensor& p : parts) {
    if (p.nbytes()) std::memcpy(dst, p.raw(), p.nbytes());
    dst += p.nbytes();
  }
  return out;
}

}  // namespace

std::vector<std::string> EnsembleComposingModels(const ModelConfig& config) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& st : config.ensemble_scheduling().step())
    if (seen.insert(st.model_name()).second) out.push_back(st.model_name());
  return out;
}

std::string Ensemble::Step::Label(size_t index) const {
  return StrCat("ensemble step ", index, " (model '", model, "'", version.empty() ? "" : " version " + version, ")");
}

Result<std::shared_ptr<const Ensemble>> Ensemble::Create(const ModelConfig& config, const ConfigLookup& lookup) {
  auto e = std::shared_ptr<Ensemble>(new Ensemble());
  e->name_ = config.name();
  const bool batching = config.max_batch_size() > 0;
  std::map<std::string, TensorInfo> tensors;
  for (const auto& in : config.input())
    tensors[in.name()] = {DTypeFromConfig(in.data_type()), FullDims(in, batching),
                          StrCat("ensemble input '", in.name(), "'")};
  const auto& steps = config.ensemble_scheduling().step();
  std::map<int, sc::SampanConfig::FanOut> fan_out;  // the repository checked the step indices
  for (const auto& f : config.sampan().fan_out()) fan_out[f.step()] = f;
  std::vector<ModelConfig> composing;
  for (int i = 0; i < steps.size(); ++i) {
    const auto& ps = steps[i];
    Step st;
    st.model = ps.model_name();
    st.version = ps.model_version() > 0 ? std::to_string(ps.model_version()) : "";
    const std::string label = st.Label(static_cast<size_t>(i));
    auto c = lookup(st.model, st.version);
    if (!c.ok()) return c.status().WithContext(label);
    const ModelConfig& mc = *c;
    if (mc.platform() == "ensemble")
      return InvalidArgument(label, ": model '", st.model,
                             "' is itself an ensemble; a step must name a model that runs");
    if (mc.has_sequence_batching()) {
      // One request of the ensemble is one step of the sequence in this model.
      if (fan_out.count(i))
        return InvalidArgument(label, ": model '", st.model,
                               "' is a sequence model; sampan.fan_out would send one "
                               "ensemble request as several steps of its sequence");
      st.sequence = true;
      if (e->sequence_model_.empty()) e->sequence_model_ = st.model;
    }
    if (mc.model_transaction_policy().decoupled())
      return Unsupported(label, ": model '", st.model,
                         "' is decoupled; an ensemble step needs one answer per request "
                         "(make the ensemble itself decoupled instead)");
    if (auto f = fan_out.find(i); f != fan_out.end()) {
      if (mc.max_batch_size() <= 0)
        return InvalidArgument(label, ": sampan.fan_out sends this step's rows as batches, but model '", st.model,
                               "' does not batch (max_batch_size 0)");
      if (f->second.max_rows() > static_cast<uint32_t>(mc.max_batch_size()))
        return InvalidArgument(label, ": sampan.fan_out max_rows ", f->second.max_rows(), " is larger than model '",
                               st.model, "''s max_batch_size ", mc.max_batch_size());
      st.fan_out = true;
      st.max_rows = f->second.max_rows() > 0 ? f->second.max_rows() : mc.max_batch_size();
      st.max_total_rows = f->second.max_total_rows() > 0 ? f->second.max_total_rows() : 4096;
    } else if (batching && mc.max_batch_size() > 0 && mc.max_batch_size() < config.max_batch_size())
      return InvalidArgument(label, ": the ensemble's max_batch_size ", config.max_batch_size(),
                             " is larger than model '", st.model, "''s ", mc.max_batch_size(),
                             " (a full ensemble batch would be refused there)");
    std::set<std::string> fed;
    for (const auto& [model_in, tensor] : ps.input_map()) {
      auto ci = std::find_if(mc.input().begin(), mc.input().end(), [&](const auto& x) { return x.name() == model_in; });
      if (ci == mc.input().end())
        return InvalidArgument(label, ": input_map names '", model_in, "', which is not an input of model '", st.model,
                               "' (its inputs: ", Names(mc.input()), ")");
      fed.insert(model_in);
      st.inputs.emplace_back(model_in, tensor);
    }
    for (const auto& ci : mc.input())
      if (!ci.optional() && !fed.count(ci.name()))
        return InvalidArgument(label, ": model input '", ci.name(), "' is not fed (add it to input_map)");
    for (const auto& [model_out, tensor] : ps.output_map()) {
      auto co =
          std::find_if(mc.output().begin(), mc.output().end(), [&](const auto& x) { return x.name() == model_out; });
      if (co == mc.output().end())
        return InvalidArgument(label, ": output_map names '", model_out, "', which is not an output of model '",
                               st.model, "' (its outputs: ", Names(mc.output()), ")");
      tensors[tensor] = {DTypeFromConfig(co->data_type()), FullDims(*co, mc.max_batch_size() > 0),
                         StrCat("output '", model_out, "' of ", label)};
      st.outputs.emplace_back(model_out, tensor);
      st.output_types.emplace_back(DTypeFromConfig(co->data_type()),
                                   std::vector<int64_t>(co->dims().begin(), co->dims().end()));
    }
    // std::map iteration: input_map/output_map in name order, so a config gives one request layout.
    composing.push_back(mc);
    e->steps_.push_back(std::move(st));
  }
  // Tensors a fan-out step gathers: any number of rows (0 too), which a batching model can take
  // only by fanning out itself.
  std::map<std::string, size_t> gathered;
  for (size_t i = 0; i < e->steps_.size(); ++i)
    if (e->steps_[i].fan_out)
      for (const auto& [model_out, tensor] : e->steps_[i].outputs) gathered[tensor] = i;
  // Every read against what its producer declares.
  for (size_t i = 0; i < e->steps_.size(); ++i) {
    const Step& st = e->steps_[i];
    const ModelConfig& mc = composing[i];
    for (const auto& [model_in, tensor] : st.inputs) {
      if (auto g = gathered.find(tensor); g != gathered.end() && !st.fan_out && mc.max_batch_size() > 0)
        return InvalidArgument(st.Label(i), ": model '", st.model, "' batches and reads tensor '", tensor,
                               "', which fan-out ", e->steps_[g->second].Label(g->second),
                               " gathers (any number of rows, 0 too): list this step in sampan.fan_out as well");
      const TensorInfo& t = tensors.at(tensor);  // the repository checked that every read tensor has a producer
      const auto& ci =
          *std::find_if(mc.input().begin(), mc.input().end(), [&](const auto& x) { return x.name() == model_in; });
      const DType want = DTypeFromConfig(ci.data_type());
      const std::vector<int64_t> dims = FullDims(ci, mc.max_batch_size() > 0);
      if (t.dtype != want)
        return InvalidArgument(st.Label(i), ": input '", model_in, "' is ", TypeText(want), " but tensor '", tensor,
                               "' (", t.from, ") is ", TypeText(t.dtype));
      if (!Compatible(t.dims, dims))
        return InvalidArgument(st.Label(i), ": input '", model_in, "' has dims ", DimsText(dims), " but tensor '",
                               tensor, "' (", t.from, ") has ", DimsText(t.dims),
                               " (a leading -1 is the batch dim of a model with max_batch_size > 0)");
    }
  }
  for (const auto& out : config.output()) {
    const TensorInfo& t = tensors.at(out.name());
    const DType want = DTypeFromConfig(out.data_type());
    const std::vector<int64_t> dims = FullDims(out, batching);
    if (t.dtype != want)
      return InvalidArgument("ensemble output '", out.name(), "' is ", TypeText(want), " but ", t.from, " is ",
                             TypeText(t.dtype));
    if (!Compatible(t.dims, dims))
      return InvalidArgument("ensemble output '", out.name(), "' has dims ", DimsText(dims), " but ", t.from, " has ",
                             DimsText(t.dims));
    e->outputs_[out.name()] = {want, dims};
  }
  return std::shared_ptr<const Ensemble>(std::move(e));
}

// One request on its way through the DAG.
struct Ensemble::Flight {
  //! One request to a composing model: a step's, or one part of a fan-out step's rows.
  struct Call {
    size_t step = 0, part = 0;
    InferRequest request;
  };
  //! A step's answers still to come; a fan-out step's outputs gathered part by part.
  struct Pending {
    size_t parts_left = 0;
    std::vector<int64_t> part_rows;          //!< rows of each part
    std::vector<std::vector<Tensor>> parts;  //!< [output][part]
  };

  std::shared_ptr<const Ensemble> plan;
  InferRequest base;  // id, priority, timeout, cancelled, keepalive (no inputs)
  std::vector<std::string> wanted;
  Dispatch dispatch;
  EnsembleDone done;

  std::mutex mu;
  std::map<std::string, Tensor> tensors;
  std::vector<bool> sent;
  std::vector<Pending> pending;
  size_t finished_steps = 0;
  bool answered = false;

  InferRequest Request(const Step& st) const {
    InferRequest r;
    r.model_name = st.model;
    r.model_version = st.version;
    r.id = base.id;
    r.priority = base.priority;
    r.timeout_us = base.timeout_us;
    r.cancelled = base.cancelled;
    r.keepalive = base.keepalive;  // the ensemble's inputs may wrap the front end's buffers
    if (st.sequence) r.sequence = base.sequence;
    for (const auto& [out, tensor] : st.outputs) r.outputs.push_back(out);
    return r;
  }

  // Under mu: a fan-out step's rows (every input's first dim, all equal).
  Result<int64_t> FanOutRows(size_t i) const {
    const Step& st = plan->steps_[i];
    int64_t rows = -1;
    std::string first;
    for (const auto& [in, tensor] : st.inputs) {
      const Tensor& t = tensors.at(tensor);
      if (t.rank() == 0)
        return InvalidArgument(st.Label(i), ": fans out over the rows of tensor '", tensor, "', but it is a scalar");
      if (rows >= 0 && t.dim(0) != rows)
        return InvalidArgument(st.Label(i), ": fans out over rows, but tensor '", first, "' has ", rows,
                               " and tensor '", tensor, "' has ", t.dim(0));
      if (rows < 0) first = tensor;
      rows = t.dim(0);
    }
    if (rows > st.max_total_rows)
      return InvalidArgument(st.Label(i), ": tensor '", first, "' has ", rows,
                             " rows, more than the fan-out's limit (sampan.fan_out max_total_rows ", st.max_total_rows,
                             ")");
    return rows;
  }

  // Under mu: sends (into `calls`) every step whose tensors all exist now, marking them sent. A
  // fan-out step over 0 rows finishes at once with outputs of 0 rows, which can make more steps
  // ready. An error names the step.
  Status Advance(std::vector<Call>* calls) {
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t i = 0; i < plan->steps_.size(); ++i) {
        if (sent[i]) continue;
        const Step& st = plan->steps_[i];
        bool all = true;
        for (const auto& [in, tensor] : st.inputs) all = all && tensors.count(tensor);
        if (!all) continue;
        sent[i] = true;
        Pending& p = pending[i];
        if (!st.fan_out) {
          InferRequest r = Request(st);
          for (const auto& [in, tensor] : st.inputs) {
            const Tensor& t = tensors.at(tensor);
            r.inputs.push_back(InferTensor{in, t.dtype(), t.shape(), t});
          }
          p.parts_left = 1;
          calls->push_back({i, 0, std::move(r)});
          continue;
        }
        SP_ASSIGN_OR_RETURN(const int64_t rows, FanOutRows(i));
        if (rows == 0) {
          for (size_t o = 0; o < st.outputs.size(); ++o) {
            const auto& [dtype, dims] = st.output_types[o];
            Shape shape{0};
            for (int64_t d : dims) shape.push_back(std::max<int64_t>(d, 0));
            tensors[st.outputs[o].second] =
                dtype == DType::kString ? Tensor::FromStrings({}, shape) : Tensor::Alloc(dtype, shape);
          }
          ++finished_steps;
          progress = true;
          continue;
        }
        const int64_t n = (rows + st.max_rows - 1) / st.max_rows;
        p.parts_left = static_cast<size_t>(n);
        p.parts.assign(st.outputs.size(), std::vector<Tensor>(static_cast<size_t>(n)));
        for (int64_t k = 0; k < n; ++k) {
          const int64_t begin = k * st.max_rows, count = std::min(st.max_rows, rows - begin);
          p.part_rows.push_back(count);
          InferRequest r = Request(st);
          for (const auto& [in, tensor] : st.inputs) {
            const Tensor& t = tensors.at(tensor);
            Tensor part = n == 1 ? t : RowSlice(t, begin, count);
            r.inputs.push_back(InferTensor{in, part.dtype(), part.shape(), part});
          }
          calls->push_back({i, static_cast<size_t>(k), std::move(r)});
        }
      }
    }
    return Status::Ok();
  }

  // Under mu: records a step's (or a part's) answer; the step finishes with its last part.
  Status Record(size_t step, size_t part, const InferResponse& r) {
    const Step& st = plan->steps_[step];
    Pending& p = pending[step];
    for (size_t o = 0; o < st.outputs.size(); ++o) {
      const std::string& out = st.outputs[o].first;
      auto it = std::find_if(r.outputs.begin(), r.outputs.end(), [&](const InferTensor& t) { return t.name == out; });
      if (it == r.outputs.end()) return Internal(st.Label(step), ": the response has no output '", out, "'");
      Tensor t = it->data.shape() == it->shape ? it->data : it->data.Reshaped(it->shape);
      if (!st.fan_out) {
        tensors[st.outputs[o].second] = std::move(t);
        continue;
      }
      if (t.rank() == 0 || t.dim(0) != p.part_rows[part])
        return Internal(st.Label(step), ": output '", out, "' answered ", t.Describe(), " to a request of ",
                        p.part_rows[part], " rows");
      p.parts[o][part] = std::move(t);
    }
    if (--p.parts_left > 0) return Status::Ok();
    if (st.fan_out) {
      for (size_t o = 0; o < st.outputs.size(); ++o) {
        auto all = ConcatRows(p.parts[o]);
        if (!all.ok()) return all.status().WithContext(StrCat(st.Label(step), ": output '", st.outputs[o].first, "'"));
        tensors[st.outputs[o].second] = std::move(*all);
      }
      p.parts.clear();
    }
    ++finished_steps;
    return Status::Ok();
  }

  // Under mu: the ensemble outputs once every step has finished.
  Result<std::map<std::string, Tensor>> Outputs() const {
    std::map<std::string, Tensor> outs;
    for (const auto& name : wanted) {
      const Tensor& t = tensors.at(name);
      const auto& [dtype, dims] = plan->outputs_.at(name);
      std::vector<int64_t> got(t.shape().begin(), t.shape().end());
      if (t.dtype() != dtype || !Compatible(got, dims))
        return Internal("ensemble output '", name, "' came out as ", TypeText(t.dtype()), DimsText(got),
                        " but the config declares ", TypeText(dtype), DimsText(dims));
      outs[name] = t;
    }
    return outs;
  }

  // Under mu: after the first step error or the last step, the answer (taken once).
  EnsembleDone Answer() {
    answered = true;
    return std::move(done);
  }
};

void Ensemble::Run(std::map<std::string, Tensor> inputs, const InferRequest& request, std::vector<std::string> wanted,
                   const Dispatch& dispatch, EnsembleDone done) const {
  auto run = std::make_shared<Flight>();
  run->plan = shared_from_this();
  run->base.id = request.id;
  run->base.priority = request.priority;
  run->base.timeout_us = request.timeout_us;
  run->base.cancelled = request.cancelled;
  run->base.keepalive = request.keepalive;
  run->base.sequence = request.sequence;
  run->wanted = std::move(wanted);
  run->dispatch = dispatch;
  run->done = std::move(done);
  run->tensors = std::move(inputs);
  run->sent.assign(steps_.size(), false);
  run->pending.resize(steps_.size());

  // Sends what is ready; each answer records its outputs and sends what they unblock.
  struct Sender {
    static void Send(const std::shared_ptr<Flight>& run, std::vector<Flight::Call> calls) {
      for (auto& c : calls) {
        {
          // A call answered on the spot with an error (a full queue, a model not ready) ends
          // the request: what is left of the list is not sent.
          std::lock_guard<std::mutex> lock(run->mu);
          if (run->answered) return;
        }
        const size_t step = c.step, part = c.part;
        run->dispatch(std::move(c.request),
                      [run, step, part](Result<InferResponse> r) { Finish(run, step, part, std::move(r)); });
      }
    }
    // Under run->mu, after a change: the answer when the request is over (an error, or every
    // step finished), else the calls that became ready.
    static EnsembleDone Settle(const std::shared_ptr<Flight>& run, Status failed,
                               Result<std::map<std::string, Tensor>>* result, std::vector<Flight::Call>* next) {
      if (failed.ok() && run->finished_steps < run->plan->steps_.size()) failed = run->Advance(next);
      if (!failed.ok()) {
        next->clear();
        *result = failed;
        return run->Answer();
      }
      if (run->finished_steps < run->plan->steps_.size()) return nullptr;
      *result = run->Outputs();
      return run->Answer();
    }
    static void Finish(const std::shared_ptr<Flight>& run, size_t step, size_t part, Result<InferResponse> r) {
      const Step& st = run->plan->steps_[step];
      EnsembleDone answer;
      Result<std::map<std::string, Tensor>> result = std::map<std::string, Tensor>{};
      std::vector<Flight::Call> next;
      {
        std::lock_guard<std::mutex> lock(run->mu);
        if (run->answered) return;  // an earlier step failed: the request was answered then
        Status failed = r.ok() ? run->Record(step, part, *r) : r.status().WithContext(st.Label(step));
        if (failed.ok() && run->base.cancelled && run->base.cancelled->load())
          failed = Cancelled("the request was cancelled (after ", st.Label(step), ")");
        answer = Settle(run, std::move(failed), &result, &next);
      }
      if (answer) {
        answer(std::move(result));
        return;
      }
      Send(run, std::move(next));
    }
  };
  std::vector<Flight::Call> first;
  EnsembleDone answer;
  Result<std::map<std::string, Tensor>> result = std::map<std::string, Tensor>{};
  {
    std::lock_guard<std::mutex> lock(run->mu);
    answer = Sender::Settle(run, Status::Ok(), &result, &first);
  }
  if (answer) {
    answer(std::move(result));
    return;
  }
  Sender::Send(run, std::move(first));
}

}  // namespace sampan::server
