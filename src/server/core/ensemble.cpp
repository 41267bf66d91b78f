#include "server/core/ensemble.h"

#include <atomic>
#include <mutex>
#include <set>

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
    tensors[in.name()] = {DTypeFromConfig(in.data_type()), FullDims(in, batching), StrCat("ensemble input '", in.name(), "'")};
  const auto& steps = config.ensemble_scheduling().step();
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
      return InvalidArgument(label, ": model '", st.model, "' is itself an ensemble; a step must name a model that runs");
    if (batching && mc.max_batch_size() > 0 && mc.max_batch_size() < config.max_batch_size())
      return InvalidArgument(label, ": the ensemble's max_batch_size ", config.max_batch_size(), " is larger than model '",
                             st.model, "''s ", mc.max_batch_size(), " (a full ensemble batch would be refused there)");
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
      auto co = std::find_if(mc.output().begin(), mc.output().end(), [&](const auto& x) { return x.name() == model_out; });
      if (co == mc.output().end())
        return InvalidArgument(label, ": output_map names '", model_out, "', which is not an output of model '", st.model,
                               "' (its outputs: ", Names(mc.output()), ")");
      tensors[tensor] = {DTypeFromConfig(co->data_type()), FullDims(*co, mc.max_batch_size() > 0),
                         StrCat("output '", model_out, "' of ", label)};
      st.outputs.emplace_back(model_out, tensor);
    }
    // std::map iteration: input_map/output_map in name order, so a config gives one request layout.
    composing.push_back(mc);
    e->steps_.push_back(std::move(st));
  }
  // Every read against what its producer declares.
  for (size_t i = 0; i < e->steps_.size(); ++i) {
    const Step& st = e->steps_[i];
    const ModelConfig& mc = composing[i];
    for (const auto& [model_in, tensor] : st.inputs) {
      const TensorInfo& t = tensors.at(tensor);  // the repository checked that every read tensor has a producer
      const auto& ci = *std::find_if(mc.input().begin(), mc.input().end(), [&](const auto& x) { return x.name() == model_in; });
      const DType want = DTypeFromConfig(ci.data_type());
      const std::vector<int64_t> dims = FullDims(ci, mc.max_batch_size() > 0);
      if (t.dtype != want)
        return InvalidArgument(st.Label(i), ": input '", model_in, "' is ", TypeText(want), " but tensor '", tensor,
                               "' (", t.from, ") is ", TypeText(t.dtype));
      if (!Compatible(t.dims, dims))
        return InvalidArgument(st.Label(i), ": input '", model_in, "' has dims ", DimsText(dims), " but tensor '", tensor,
                               "' (", t.from, ") has ", DimsText(t.dims),
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
  std::shared_ptr<const Ensemble> plan;
  InferRequest base;  // id, priority, timeout, cancelled, keepalive (no inputs)
  std::vector<std::string> wanted;
  Dispatch dispatch;
  EnsembleDone done;

  std::mutex mu;
  std::map<std::string, Tensor> tensors;
  std::vector<bool> sent;
  size_t finished_steps = 0;
  bool answered = false;

  // Under mu: the requests of every step whose tensors all exist now (marked sent).
  std::vector<std::pair<size_t, InferRequest>> Ready() {
    std::vector<std::pair<size_t, InferRequest>> out;
    for (size_t i = 0; i < plan->steps_.size(); ++i) {
      if (sent[i]) continue;
      const Step& st = plan->steps_[i];
      bool all = true;
      for (const auto& [in, tensor] : st.inputs) all = all && tensors.count(tensor);
      if (!all) continue;
      sent[i] = true;
      InferRequest r;
      r.model_name = st.model;
      r.model_version = st.version;
      r.id = base.id;
      r.priority = base.priority;
      r.timeout_us = base.timeout_us;
      r.cancelled = base.cancelled;
      r.keepalive = base.keepalive;  // the ensemble's inputs may wrap the front end's buffers
      for (const auto& [in, tensor] : st.inputs) {
        const Tensor& t = tensors.at(tensor);
        r.inputs.push_back(InferTensor{in, t.dtype(), t.shape(), t});
      }
      for (const auto& [out, tensor] : st.outputs) r.outputs.push_back(out);
      out.emplace_back(i, std::move(r));
    }
    return out;
  }

  // Takes the answer (under mu: answered set); the caller calls it after unlocking.
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
  run->wanted = std::move(wanted);
  run->dispatch = dispatch;
  run->done = std::move(done);
  run->tensors = std::move(inputs);
  run->sent.assign(steps_.size(), false);

  // Sends what is ready; each answer records its outputs and sends what they unblock.
  struct Sender {
    static void Send(const std::shared_ptr<Flight>& run, std::vector<std::pair<size_t, InferRequest>> ready) {
      for (auto& [i, req] : ready) {
        const size_t step = i;
        run->dispatch(std::move(req), [run, step](Result<InferResponse> r) { Finish(run, step, std::move(r)); });
      }
    }
    static void Finish(const std::shared_ptr<Flight>& run, size_t step, Result<InferResponse> r) {
      const Step& st = run->plan->steps_[step];
      EnsembleDone answer;
      Result<std::map<std::string, Tensor>> result = std::map<std::string, Tensor>{};
      std::vector<std::pair<size_t, InferRequest>> next;
      {
        std::lock_guard<std::mutex> lock(run->mu);
        if (run->answered) return;  // an earlier step failed: the request was answered then
        ++run->finished_steps;
        Status failed = r.ok() ? Status::Ok() : r.status().WithContext(st.Label(step));
        if (failed.ok()) {
          for (const auto& [out, tensor] : st.outputs) {
            auto it = std::find_if(r->outputs.begin(), r->outputs.end(), [&](const InferTensor& t) { return t.name == out; });
            if (it == r->outputs.end()) {
              failed = Internal(st.Label(step), ": the response has no output '", out, "'");
              break;
            }
            run->tensors[tensor] = it->data.shape() == it->shape ? it->data : it->data.Reshaped(it->shape);
          }
        }
        if (failed.ok() && run->base.cancelled && run->base.cancelled->load())
          failed = Cancelled("the request was cancelled (after ", st.Label(step), ")");
        if (!failed.ok()) {
          answer = run->Answer();
          result = failed;
        } else if (run->finished_steps == run->plan->steps_.size()) {
          answer = run->Answer();
          std::map<std::string, Tensor> outs;
          for (const auto& name : run->wanted) {
            const Tensor& t = run->tensors.at(name);
            const auto& [dtype, dims] = run->plan->outputs_.at(name);
            std::vector<int64_t> got(t.shape().begin(), t.shape().end());
            if (t.dtype() != dtype || !Compatible(got, dims)) {
              result = Internal("ensemble output '", name, "' came out as ", TypeText(t.dtype()), DimsText(got),
                                " but the config declares ", TypeText(dtype), DimsText(dims));
              break;
            }
            outs[name] = t;
          }
          if (result.ok()) result = std::move(outs);
        } else {
          next = run->Ready();
        }
      }
      if (answer) {
        answer(std::move(result));
        return;
      }
      Send(run, std::move(next));
    }
  };
  std::vector<std::pair<size_t, InferRequest>> first;
  {
    std::lock_guard<std::mutex> lock(run->mu);
    first = run->Ready();
  }
  Sender::Send(run, std::move(first));
}

}  // namespace sampan::server
