// A plan file as `sampan bench`/`run`/`serve` load it. A flipped byte fails the
// checksum at once, so before parsing, an input with a sane header gets its
// checksum recomputed: mutations then reach the metadata (protobuf), the graph
// and the weight references behind it, as a plan written by a buggy or
// hostile tool would. ParsePlan; for a plan it accepts, Engine::Create and a
// context on the reference backend; and when every value of the graph has a
// static shape and they total at most 16 MiB, one run on zero inputs.
#include <cstring>

#include "fuzz_util.h"
#include "ir/graph.h"
#include "plan.pb.h"
#include "plan/plan.h"
#include "proto_mutator.h"
#include "runtime/engine.h"

using namespace sampan;

// Field changes in the metadata of a well-formed plan, the file laid out again
// around it (header offsets, padding, the same weights blob, checksum); else
// byte-level changes anywhere.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  fuzz::ProtoMutator mutator(seed);
  plan::PlanHeader h;
  if (mutator.Below(4) != 0 && size >= sizeof(h)) {
    std::memcpy(&h, data, sizeof(h));
    const uint64_t end = h.blob_offset + h.blob_size;
    sampan::planfile::PlanProto proto;
    if (std::memcmp(h.magic, plan::kMagic, sizeof(plan::kMagic)) == 0 && h.meta_offset >= sizeof(h) &&
        h.meta_offset <= h.blob_offset && h.meta_size <= h.blob_offset - h.meta_offset && end >= h.blob_offset &&
        end <= size && proto.ParseFromArray(data + h.meta_offset, static_cast<int>(h.meta_size))) {
      mutator.Mutate(&proto);
      std::string meta;
      proto.SerializeToString(&meta);
      const std::string blob(reinterpret_cast<const char*>(data) + h.blob_offset, h.blob_size);
      h.meta_offset = sizeof(h);
      h.meta_size = meta.size();
      h.blob_offset = (h.meta_offset + meta.size() + plan::kAlignment - 1) / plan::kAlignment * plan::kAlignment;
      std::string out(h.blob_offset + blob.size(), '\0');
      std::memcpy(out.data() + h.meta_offset, meta.data(), meta.size());
      std::memcpy(out.data() + h.blob_offset, blob.data(), blob.size());
      h.checksum = plan::Hash64(out.data() + h.meta_offset, out.size() - h.meta_offset);
      std::memcpy(out.data(), &h, sizeof(h));
      if (out.size() <= max_size) {
        std::memcpy(data, out.data(), out.size());
        return out.size();
      }
    }
  }
  return LLVMFuzzerMutate(data, size, max_size);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto bytes = std::make_shared<std::string>(reinterpret_cast<const char*>(data), size);
  if (bytes->size() >= sizeof(plan::PlanHeader) &&
      std::memcmp(bytes->data(), plan::kMagic, sizeof(plan::kMagic)) == 0) {
    plan::PlanHeader h;
    std::memcpy(&h, bytes->data(), sizeof(h));
    const uint64_t end = h.blob_offset + h.blob_size;
    if (h.meta_offset <= bytes->size() && end >= h.blob_offset && end <= bytes->size() && h.meta_offset <= end) {
      h.checksum = plan::Hash64(bytes->data() + h.meta_offset, end - h.meta_offset);
      std::memcpy(bytes->data(), &h, sizeof(h));
    }
  }
  auto plan = plan::ParsePlan(bytes, "fuzz.plan");
  if (!plan.ok()) {
    fuzz::ExpectExplained(plan.status(), "ParsePlan");
    return 0;
  }
  fuzz::Reached("parsed");
  // Small enough to run? Every value static, 16 MiB in all.
  std::map<std::string, Tensor> inputs;
  bool runnable = true;
  uint64_t total = 0;
  for (const ir::Value* v : plan->graph->values()) {
    if (!v->type.is_static() || v->type.dtype == DType::kUndefined) {
      runnable = false;
      break;
    }
    const Shape shape = v->type.static_shape();
    if (!CheckShape(shape, int64_t{1} << 40).ok() ||
        (total += static_cast<uint64_t>(NumElements(shape)) * DTypeSize(v->type.dtype)) > (uint64_t{16} << 20)) {
      runnable = false;
      break;
    }
  }
  if (runnable)
    for (const ir::Value* v : plan->graph->inputs()) {
      Result<Tensor> t = Tensor::Zeros(v->type.dtype, v->type.static_shape());
      if (!t.ok()) {
        runnable = false;
        break;
      }
      inputs[v->name()] = std::move(*t);
    }
  auto engine = runtime::Engine::Create(std::move(*plan));
  if (!engine.ok()) {
    fuzz::ExpectExplained(engine.status(), "Engine::Create");
    return 0;
  }
  auto context = (*engine)->CreateContext();
  if (!context.ok()) {
    fuzz::ExpectExplained(context.status(), "CreateContext");
    return 0;
  }
  fuzz::Reached("context created");
  if (runnable) {
    fuzz::Reached("ran");
    auto out = (*context)->Run(inputs);
    if (!out.ok()) fuzz::ExpectExplained(out.status(), "Context::Run");
  }
  return 0;
}
