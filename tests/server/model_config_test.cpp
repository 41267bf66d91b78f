// config.pbtxt parsing: a realistic Triton config, syntax errors with
// file:line:col, each semantic check, and garbage that must never crash.
#include "server/repository/model_config.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace sampan::server {
namespace {

namespace sc = ::sampan::serverconfig;

// Whether `text` contains `part`, showing both when it does not.
::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\n  message: " << text << "\n  lacks:   " << part;
}
#define EXPECT_CONTAINS(text, part) EXPECT_TRUE(Contains((text), (part)))

const char* kResNet =
    R"pb(# ResNet-50 served from ONNX, as Triton's docs would have it.
         name: "resnet50"
         platform: "onnxruntime_onnx"
         max_batch_size: 32
         version_policy: { specific: { versions: [ 1, 3 ] } } input
         [ {
           name: "input"
           data_type: TYPE_FP32
           format: FORMAT_NCHW
           dims: [ 3, 224, 224 ]
         }] output
         [ {
           name: "probs"
           data_type: TYPE_FP32
           dims: [ 1000 ]
           reshape { shape: [ 1, 1000 ] }
           label_filename: "imagenet_labels.txt"
         }] instance_group
         [ {
           count: 2,
           kind: KIND_GPU,
           gpus: [ 0, 1 ]
         }
           , { kind: KIND_CPU }]
         dynamic_batching {
           preferred_batch_size: [ 8, 16 ]
           max_queue_delay_microseconds: 100
           preserve_ordering: true
           priority_levels: 2
           default_priority_level: 2
           default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 5000 max_queue_size: 64 }
           priority_queue_policy {
             key: 1
             value { timeout_action: DELAY allow_timeout_override: true }
           }
         }
         parameters {
           key: "intra_op_thread_count"
           value: { string_value: "4" }
         }
         sampan {
           precision: "fp16"
           backend: "reference"
           profiles {
             input: "input"
             min: [ 1, 3, 224, 224 ]
             opt: [ 8, 3, 224, 224 ]
             max: [ 32, 3, 224, 224 ]
           }
         }
    )pb";

// Parses `text`; expects failure and returns the message.
std::string ErrorOf(const std::string& text, const std::string& model_dir = "") {
  auto r = ParseModelConfig(text, "config.pbtxt", model_dir);
  EXPECT_FALSE(r.ok()) << "parsed, but should not have:\n" << text;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

TEST(ModelConfigTest, ParsesRealisticTritonConfig) {
  auto r = ParseModelConfig(kResNet, "resnet50/config.pbtxt", "resnet50");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ModelConfig& c = *r;
  EXPECT_EQ(c.name(), "resnet50");
  EXPECT_EQ(c.platform(), "onnxruntime_onnx");
  EXPECT_EQ(c.max_batch_size(), 32);
  ASSERT_EQ(c.input_size(), 1);
  EXPECT_EQ(c.input(0).data_type(), sc::TYPE_FP32);
  EXPECT_EQ(c.input(0).format(), sc::ModelInput::FORMAT_NCHW);
  EXPECT_EQ(std::vector<int64_t>(c.input(0).dims().begin(), c.input(0).dims().end()),
            (std::vector<int64_t>{3, 224, 224}));
  ASSERT_EQ(c.output_size(), 1);
  EXPECT_EQ(c.output(0).reshape().shape_size(), 2);
  EXPECT_EQ(c.output(0).label_filename(), "imagenet_labels.txt");
  ASSERT_EQ(c.instance_group_size(), 2);
  EXPECT_EQ(c.instance_group(0).kind(), sc::ModelInstanceGroup::KIND_GPU);
  EXPECT_EQ(c.instance_group(0).count(), 2);
  EXPECT_EQ(c.instance_group(0).gpus_size(), 2);
  EXPECT_EQ(c.instance_group(1).kind(), sc::ModelInstanceGroup::KIND_CPU);
  EXPECT_EQ(c.instance_group(1).count(), 1) << "absent count defaults to 1";
  ASSERT_TRUE(c.has_dynamic_batching());
  EXPECT_EQ(c.dynamic_batching().preferred_batch_size_size(), 2);
  EXPECT_EQ(c.dynamic_batching().max_queue_delay_microseconds(), 100u);
  EXPECT_EQ(c.dynamic_batching().default_queue_policy().max_queue_size(), 64u);
  ASSERT_EQ(c.dynamic_batching().priority_queue_policy().count(1), 1u);
  EXPECT_EQ(c.dynamic_batching().priority_queue_policy().at(1).timeout_action(), sc::ModelQueuePolicy::DELAY);
  ASSERT_TRUE(c.version_policy().has_specific());
  EXPECT_EQ(c.version_policy().specific().versions_size(), 2);
  EXPECT_EQ(c.parameters().at("intra_op_thread_count").string_value(), "4");
  EXPECT_EQ(c.sampan().precision(), "fp16");
  EXPECT_EQ(c.sampan().backend(), "reference");
  ASSERT_EQ(c.sampan().profiles_size(), 1);
  EXPECT_EQ(c.sampan().profiles(0).max(0), 32);
}

TEST(ModelConfigTest, MinimalConfigGetsTritonDefaults) {
  auto r = ParseModelConfig(R"(
    backend: "onnxruntime"
    input { name: "x" data_type: TYPE_INT64 dims: [-1] }
    output { name: "y" data_type: TYPE_STRING dims: [1] }
    instance_group { kind: KIND_AUTO }
  )",
                            "m/config.pbtxt", "m");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->name(), "m") << "name comes from the model directory";
  EXPECT_EQ(r->max_batch_size(), 0);
  EXPECT_EQ(r->instance_group(0).count(), 1);
  ASSERT_TRUE(r->version_policy().has_latest());
  EXPECT_EQ(r->version_policy().latest().num_versions(), 1u);
}

TEST(ModelConfigTest, AllTypesAndKindsParse) {
  for (const char* t :
       {"TYPE_BOOL", "TYPE_UINT8", "TYPE_UINT16", "TYPE_UINT32", "TYPE_UINT64", "TYPE_INT8", "TYPE_INT16", "TYPE_INT32",
        "TYPE_INT64", "TYPE_FP16", "TYPE_FP32", "TYPE_FP64", "TYPE_STRING", "TYPE_BF16"}) {
    std::string text = std::string("name: \"m\" input { name: \"x\" data_type: ") + t + " dims: 1 }";
    auto r = ParseModelConfig(text, "config.pbtxt");
    ASSERT_TRUE(r.ok()) << t << ": " << r.status().ToString();
    EXPECT_EQ(DataTypeName(r->input(0).data_type()), std::string(t));
  }
  for (const char* k : {"KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL"}) {
    auto r = ParseModelConfig(std::string("name: \"m\" instance_group { kind: ") + k + " count: 3 }", "config.pbtxt");
    ASSERT_TRUE(r.ok()) << k << ": " << r.status().ToString();
  }
  auto all = ParseModelConfig("name: \"m\" version_policy { all {} }", "config.pbtxt");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_TRUE(all->version_policy().has_all());
}

// --- syntax errors: file:line:col from the text-format parser --------------

TEST(ModelConfigTest, UnknownFieldNamesFileLineColumnAndSuggests) {
  std::string msg = ErrorOf(
      "name: \"m\"\n"
      "platform: \"onnxruntime_onnx\"\n"
      "\n"
      "\n"
      "\n"
      "\n"
      "  max_batchsize: 8\n");
  EXPECT_CONTAINS(msg, "config.pbtxt:7:3: unknown field 'max_batchsize' in ModelConfig");
  EXPECT_CONTAINS(msg, "did you mean 'max_batch_size'");
  // A tab advances to the next multiple of 8, as protobuf's tokenizer counts.
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\n\tmax_batch: 8\n"), "config.pbtxt:2:9: unknown field 'max_batch'");
  // Name and value on different lines: the position stays where the parser put it.
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\nplatfrom\n: \"x\"\n"), "config.pbtxt:3:1: unknown field 'platfrom'");
}

TEST(ModelConfigTest, UnknownNestedFieldAndUnsupportedTritonSection) {
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\ninput {\n  name: \"x\"\n  dim: [1]\n}\n"),
                  "config.pbtxt:4:3: unknown field 'dim' in ModelInput (did you mean 'dims'?)");
  // Parts of Triton's schema Sampan does not implement are refused, not ignored.
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\nbatch_input { kind: BATCH_ELEMENT_COUNT }\n"),
                  "config.pbtxt:2:1: unknown field 'batch_input'");
}

TEST(ModelConfigTest, SequenceBatchingChecksNameTheField) {
  const std::string head = "name: \"m\"\nmax_batch_size: 2\n";
  EXPECT_CONTAINS(ErrorOf(head + "sequence_batching {\n  control_input [ { name: \"S\" control [ { kind: "
                                 "CONTROL_SEQUENCE_START int32_false_true: [ 0, 1, 2 ] } ] } ]\n}\n"),
                  "config.pbtxt:4:");
  EXPECT_CONTAINS(ErrorOf(head + "sequence_batching {\n  control_input [ { name: \"S\" control [ { kind: "
                                 "CONTROL_SEQUENCE_START int32_false_true: [ 0, 1, 2 ] } ] } ]\n}\n"),
                  "holds 2 values");
  EXPECT_CONTAINS(ErrorOf(head + "dynamic_batching { }\nsequence_batching { }\n"), "config.pbtxt:4:");
  EXPECT_CONTAINS(
      ErrorOf(head + "sequence_batching { control_input [ { name: \"A\" control [ { kind: "
                     "CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] }, { name: \"B\" "
                     "control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] } ] }\n"),
      "CONTROL_SEQUENCE_READY is given to more than one control input");
  EXPECT_CONTAINS(
      ErrorOf(head + "sequence_batching { state [ { input_name: \"a\" output_name: \"b\" dims: [ 1 ] } ] }\n"),
      "state[0].data_type: must be given");
  EXPECT_CONTAINS(ErrorOf(head + "sequence_batching { oldest { preferred_batch_size: [ 3 ] } }\n"),
                  "preferred_batch_size[0]: 3 is not in [1, max_batch_size = 2]");
  EXPECT_CONTAINS(ErrorOf(head + "sequence_batching { direct { minimum_slot_utilization: 1.5 } }\n"),
                  "minimum_slot_utilization: must be in [0, 1]");
  EXPECT_CONTAINS(ErrorOf(head + "response_cache { enable: true }\nsequence_batching { }\n"),
                  "cannot use response_cache");
  EXPECT_CONTAINS(ErrorOf(head + "sequence_batching { state [ { input_name: \"a\" output_name: \"b\" data_type: "
                                 "TYPE_FP32 dims: [ 2 ] initial_state [ { data_type: TYPE_FP32 dims: [ 2 ] data_file: "
                                 "\"../x\" } ] } ] }\n"),
                  "must be a file name inside the model's initial_state/ directory");
  EXPECT_TRUE(ParseModelConfig(head + "sequence_batching { oldest { max_candidate_sequences: 4 } control_input [ { "
                                      "name: \"S\" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] "
                                      "} ] } ] state [ { input_name: \"a\" output_name: \"b\" data_type: TYPE_FP32 "
                                      "dims: [ 2 ] initial_state [ { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true "
                                      "} ] } ] }\n",
                               "config.pbtxt")
                  .ok());
}

TEST(ModelConfigTest, BadEnumValue) {
  std::string msg = ErrorOf("name: \"m\"\ninput { name: \"x\" data_type: TYPE_FLOAT32 dims: 1 }\n");
  EXPECT_CONTAINS(msg, "config.pbtxt:2:30: unknown value 'TYPE_FLOAT32' for field 'data_type'");
  EXPECT_CONTAINS(msg, "did you mean 'TYPE_FP32'?");
  EXPECT_CONTAINS(ErrorOf("input { data_type: TYPE_FP23 }"), "did you mean 'TYPE_FP32'?");
  EXPECT_CONTAINS(ErrorOf("instance_group { kind: KIND_TPU }"), "field 'kind'");
}

TEST(ModelConfigTest, OptimizationPriority) {
  for (const char* p : {"PRIORITY_DEFAULT", "PRIORITY_MAX", "PRIORITY_MIN"}) {
    auto r = ParseModelConfig(std::string("name: \"m\"\noptimization { priority: ") + p + " }\n", "config.pbtxt");
    ASSERT_TRUE(r.ok()) << p << ": " << r.status().ToString();
  }
  auto max =
      ParseModelConfig("name: \"m\"\noptimization { priority: PRIORITY_MAX cuda { graphs: false } }\n", "config.pbtxt");
  ASSERT_TRUE(max.ok()) << max.status().ToString();
  EXPECT_EQ(max->optimization().priority(), serverconfig::ModelOptimizationPolicy::PRIORITY_MAX);
  std::string msg = ErrorOf("name: \"m\"\noptimization { priority: PRIORITY_HIGH }\n");
  EXPECT_CONTAINS(msg, "config.pbtxt:2:");
  EXPECT_CONTAINS(msg, "unknown value 'PRIORITY_HIGH' for field 'priority' (did you mean");
  // Numbers name the values too (the text format's rule); one without a name is refused where it is.
  auto one = ParseModelConfig("name: \"m\"\noptimization { priority: 1 }\n", "config.pbtxt");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->optimization().priority(), serverconfig::ModelOptimizationPolicy::PRIORITY_MAX);
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\noptimization {\n  priority: 7\n}\n"),
                  "config.pbtxt:3:3: optimization.priority: 7 is none of PRIORITY_DEFAULT (0), PRIORITY_MAX (1)");
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\noptimization { priority: PRIORITY_MAX priority: PRIORITY_MIN }\n"),
                  "config.pbtxt:2:");
}

TEST(ModelConfigTest, BadScalarValues) {
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\nmax_batch_size: \"eight\"\n"), "config.pbtxt:2:17:");
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\nmax_batch_size: 99999999999\n"), "config.pbtxt:2:17:");
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\ndynamic_batching { preserve_ordering: maybe }\n"), "config.pbtxt:2:");
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\nmax_batch_size: 4\nmax_batch_size: 8\n"), "config.pbtxt:3:");
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\ninput { name: \"x\"\n"), "config.pbtxt:");
}

// --- semantic errors -------------------------------------------------------

TEST(ModelConfigTest, NameRequiredAndMatchesDirectory) {
  EXPECT_CONTAINS(ErrorOf("max_batch_size: 1"), "config.pbtxt: name: must be given");
  EXPECT_CONTAINS(ErrorOf("\nname: \"resnet\"\n", "resnet50"),
                  "config.pbtxt:2:1: name: 'resnet' does not match the model directory 'resnet50'");
}

TEST(ModelConfigTest, NegativeMaxBatchSize) {
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\nmax_batch_size: -1\n"),
                  "config.pbtxt:2:1: max_batch_size: must be >= 0 (got -1)");
}

TEST(ModelConfigTest, TensorNamesAndDims) {
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\ninput [\n  { name: \"a\" data_type: TYPE_FP32 dims: 1 },\n"
                          "  { name: \"a\" data_type: TYPE_FP32 dims: 1 }\n]\n"),
                  "config.pbtxt:4:5: input[1]: name 'a' is used by an earlier input");
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\noutput { data_type: TYPE_FP32 dims: 1 }\n"), "output[0]: name must be given");
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\noutput { name: \"y\" dims: 1 }\n"), "output 'y': data_type must be given");
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\ninput {\n  name: \"x\"\n  data_type: TYPE_FP32\n}\n"),
                  "config.pbtxt:3:3: input 'x': dims must not be empty");
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\ninput {\n  name: \"x\"\n  data_type: TYPE_FP32\n  dims: [3, 0]\n}\n"),
                  "config.pbtxt:5:3: input 'x': dims[1]: must be >= 1 or -1 (got 0)");
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\ninput { name: \"x\" data_type: TYPE_FP32 dims: 3 dims: -2 }\n"),
                  "config.pbtxt:2:48: input 'x': dims[1]: must be >= 1 or -1 (got -2)");
  // Same name as an input is fine for an output (separate lists).
  auto ok = ParseModelConfig(
      "name: \"m\" input { name: \"t\" data_type: TYPE_FP32 dims: 1 }"
      " output { name: \"t\" data_type: TYPE_FP32 dims: 1 }",
      "config.pbtxt");
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
}

TEST(ModelConfigTest, ReshapeElementCounts) {
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\noutput {\n  name: \"y\"\n  data_type: TYPE_FP32\n  dims: [ 1000 ]\n"
                          "  reshape { shape: [ 2, 1000 ] }\n}\n"),
                  "config.pbtxt:6:13: output 'y': reshape: has 2000 elements but dims have 1000");
  // Dynamic on either side: not checked. Scalar reshape of [1]: fine.
  for (const char* t : {"dims: [-1] reshape { shape: [2, 3] }", "dims: [6] reshape { shape: [-1, 3] }",
                        "dims: [1] reshape { shape: [] }", "dims: [2, 3] reshape { shape: [3, 2] }"}) {
    auto r = ParseModelConfig(std::string("name: \"m\" input { name: \"x\" data_type: TYPE_FP32 ") + t + " }",
                              "config.pbtxt");
    EXPECT_TRUE(r.ok()) << t << ": " << r.status().ToString();
  }
  EXPECT_CONTAINS(ErrorOf("name: \"m\" input { name: \"x\" data_type: TYPE_FP32 dims: 1 reshape { shape: [0] } }"),
                  "reshape.shape[0]: must be >= 1 or -1");
}

TEST(ModelConfigTest, InstanceGroups) {
  EXPECT_CONTAINS(
      ErrorOf("name: \"m\"\ninstance_group [\n  { kind: KIND_CPU },\n  { kind: KIND_GPU\n    count: 0 }\n]\n"),
      "config.pbtxt:5:5: instance_group[1].count: must be >= 1 (got 0)");
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\ninstance_group { count: -3 }\n"), "instance_group[0].count");
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\ninstance_group { kind: KIND_CPU gpus: [0] }\n"),
                  "config.pbtxt:2:33: instance_group[0].gpus: only allowed with kind KIND_GPU");
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\ninstance_group { kind: KIND_GPU gpus: 0 gpus: 0 }\n"),
                  "instance_group[0].gpus[1]: GPU 0 is listed twice");
}

// instance_group.rate_limiter is checked whether or not the server runs the rate limiter.
TEST(ModelConfigTest, RateLimiter) {
  const std::string head = "name: \"m\"\ninstance_group [{ kind: KIND_CPU\n  rate_limiter {\n";
  auto r = ParseModelConfig(head +
                                "    resources [{ name: \"R\" count: 2 }, { name: \"G\" global: true count: 1 }]\n"
                                "    priority: 3 } }]\n",
                            "config.pbtxt");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->instance_group(0).rate_limiter().resources(1).name(), "G");
  EXPECT_TRUE(r->instance_group(0).rate_limiter().resources(1).global());
  EXPECT_EQ(r->instance_group(0).rate_limiter().priority(), 3u);
  EXPECT_CONTAINS(ErrorOf(head + "    resources [{ name: \"R\" count: -1 }] } }]\n"),
                  "config.pbtxt:4:35: must be a whole number >= 0 (this field cannot be negative)");
  EXPECT_CONTAINS(ErrorOf(head + "    priority: -2 } }]\n"), "config.pbtxt:4:15: must be a whole number >= 0");
  EXPECT_CONTAINS(ErrorOf(head + "    resources [{ name: \"R\" count: 0 }] } }]\n"),
                  "config.pbtxt:4:28: instance_group[0].rate_limiter.resources[0].count: must be >= 1");
  EXPECT_CONTAINS(ErrorOf(head + "    resources [{ count: 1 }] } }]\n"),
                  "instance_group[0].rate_limiter.resources[0].name: must be given");
  EXPECT_CONTAINS(ErrorOf(head + "    resources [{ name: \"R\" count: 1 }, { name: \"R\" count: 2 }] } }]\n"),
                  "instance_group[0].rate_limiter.resources[1].name: 'R' is listed twice (also resources[0])");
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\ninstance_group [\n"
                          "  { rate_limiter { resources [{ name: \"R\" global: true count: 1 }] } },\n"
                          "  { rate_limiter { resources [{ name: \"R\" count: 1 }] } }]\n"),
                  "instance_group[1].rate_limiter.resources[0].global: resource 'R' is per device here but global "
                  "in another instance group");
}

// Triton fields that parse but whose behaviour Sampan lacks are refused, each naming itself.
TEST(ModelConfigTest, TritonFieldsSampanDoesNotImplementAreRefused) {
  const std::string in = "input { name: \"x\" data_type: TYPE_FP32 dims: 1 ";
  const std::pair<std::string, std::string> cases[] = {
      {"platform: \"pytorch_libtorch\"", "platform: 'pytorch_libtorch' is not served"},
      {"platform: \"tensorrt_plan\"", "platform: 'tensorrt_plan': TensorRT engines cannot be loaded"},
      {"backend: \"python\"", "backend: 'python' is not served"},
      {"backend: \"tensorrt\"", "TensorRT engines cannot be loaded"},
      {"runtime: \"libtriton_onnxruntime.so\"", "runtime: 'libtriton_onnxruntime.so'"},
      {"cc_model_filenames { key: \"8.0\" value: \"a.onnx\" }", "cc_model_filenames: is not supported"},
      {"metric_tags { key: \"team\" value: \"ocr\" }", "metric_tags: is not supported"},
      {"max_batch_size: 2 model_transaction_policy { decoupled: true }",
       "model_transaction_policy.decoupled: needs max_batch_size 0"},
      {"model_transaction_policy { decoupled: true } output { name: \"y\" data_type: TYPE_FP32 dims: [ 3 ] }",
       "output 'y': a decoupled model streams the rows"},
      {in + "allow_ragged_batch: true }", "input 'x': allow_ragged_batch: ragged batching is not supported"},
      {in + "is_shape_tensor: true }", "input 'x': is_shape_tensor: shape tensors are not supported"},
      {in + "optional: true }", "input 'x': optional: optional inputs are not supported"},
      {"output { name: \"y\" data_type: TYPE_FP32 dims: 1 is_shape_tensor: true }", "output 'y': is_shape_tensor"},
      {"instance_group { passive: true }", "instance_group[0].passive: passive instances are not supported"},
      {"instance_group { profile: \"0\" }", "instance_group[0].profile: is not supported"},
      {"instance_group { host_policy: \"numa0\" }", "instance_group[0].host_policy"},
      {"parameters { key: \"execution_mode\" value: { string_value: \"1\" } }",
       "parameters 'execution_mode': is not a parameter Sampan reads"},
      {"parameters { key: \"intra_op_thread_count\" value: { string_value: \"0\" } }",
       "parameters 'intra_op_thread_count': must be a whole number of threads >= 1"},
      {"parameters { key: \"intra_op_thread_count\" value: { string_value: \"two\" } }", "(got \"two\")"},
  };
  for (const auto& [text, want] : cases) EXPECT_CONTAINS(ErrorOf("name: \"m\"\n" + text + "\n"), want);
  // What Sampan serves, and metadata that changes nothing a client sees, stay accepted.
  for (const char* ok :
       {"platform: \"onnxruntime_onnx\"", "platform: \"sampan_plan\"", "backend: \"onnxruntime\"",
        "backend: \"sampan\"", "instance_group { name: \"g\" }", "model_transaction_policy { decoupled: false }",
        "response_cache { enable: false }", "response_cache { enable: true }",
        "parameters { key: \"intra_op_thread_count\" value: { string_value: \"2\" } }",
        "output { name: \"y\" data_type: TYPE_FP32 dims: 1 label_filename: \"labels.txt\" }",
        "input { name: \"x\" data_type: TYPE_FP32 format: FORMAT_NHWC dims: [ 2, 2, 3 ] }"}) {
    auto r = ParseModelConfig(std::string("name: \"m\"\n") + ok + "\n", "config.pbtxt");
    EXPECT_TRUE(r.ok()) << ok << ": " << r.status().ToString();
  }
}

TEST(ModelConfigTest, DynamicBatching) {
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\ndynamic_batching { }\n"),
                  "config.pbtxt:2:1: dynamic_batching: needs max_batch_size > 0");
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\nmax_batch_size: 8\ndynamic_batching {\n  preferred_batch_size: 4\n"
                          "  preferred_batch_size: 16\n}\n"),
                  "config.pbtxt:5:3: dynamic_batching.preferred_batch_size[1]: 16 exceeds max_batch_size 8");
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\nmax_batch_size: 8\ndynamic_batching {\n  priority_levels: 2\n"
                          "  default_priority_level: 3\n}\n"),
                  "config.pbtxt:5:3: dynamic_batching.default_priority_level: must be in [1, priority_levels = 2]");
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\nmax_batch_size: 8\ndynamic_batching { default_priority_level: 1 }\n"),
                  "default_priority_level: 1 exceeds priority_levels 0");
  EXPECT_CONTAINS(
      ErrorOf("name: \"m\"\nmax_batch_size: 8\ndynamic_batching { priority_levels: 2 default_priority_level: 1\n"
              "  priority_queue_policy { key: 5 value { } } }\n"),
      "config.pbtxt:4:3: dynamic_batching.priority_queue_policy: key 5 is not a priority level");
}

TEST(ModelConfigTest, VersionPolicy) {
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\nversion_policy { latest { num_versions: 0 } }\n"),
                  "config.pbtxt:2:18: version_policy.latest.num_versions: must be >= 1");
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\nversion_policy { specific { versions: [2, 0] } }\n"),
                  "version_policy.specific.versions[1]: must be >= 1 (got 0)");
  EXPECT_CONTAINS(ErrorOf("name: \"m\"\nversion_policy { latest {} all {} }\n"), "config.pbtxt:2:");
}

TEST(ModelConfigTest, SampanSection) {
  const std::string base = "name: \"m\"\nmax_batch_size: 8\ninput { name: \"x\" data_type: TYPE_FP32 dims: [-1, 4] }\n";
  auto ok = ParseModelConfig(
      base + "sampan { profiles { input: \"x\" min: [1, 1, 4] opt: [4, 8, 4] max: [8, 16, 4] } }", "config.pbtxt");
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_CONTAINS(ErrorOf(base + "sampan {\n  precision: \"fp12\"\n}\n"),
                  "config.pbtxt:5:3: sampan.precision: unknown precision 'fp12'");
  EXPECT_CONTAINS(ErrorOf(base + "sampan { profiles { input: \"y\" } }"), "input 'y' is not an input");
  EXPECT_CONTAINS(ErrorOf(base + "sampan { profiles { input: \"x\" min: [1, 4] opt: [1, 4] max: [1, 4] } }"),
                  "min: has 2 dimensions, the input has 3 (batch dimension included)");
  EXPECT_CONTAINS(ErrorOf(base + "sampan { profiles { input: \"x\" min: [1, 9, 4] opt: [1, 8, 4] max: [1, 9, 4] } }"),
                  "needs 0 <= min <= opt <= max (got 9, 8, 9)");
  EXPECT_CONTAINS(ErrorOf(base + "sampan { profiles { input: \"x\" min: [1, 1, 4] opt: [1, 1, 4] max: [16, 1, 4] } }"),
                  "batch 16 exceeds max_batch_size 8");
  EXPECT_CONTAINS(ErrorOf(base + "sampan { profiles { input: \"x\" min: [1, 1, 2] opt: [1, 1, 4] max: [1, 1, 4] } }"),
                  "is fixed at 4 by the config");
  EXPECT_CONTAINS(ErrorOf(base + "sampan { profiles { input: \"x\" min: [1,1,4] opt: [1,1,4] max: [1,1,4] }"
                                 " profiles { input: \"x\" min: [1,1,4] opt: [1,1,4] max: [1,1,4] } }"),
                  "already has a profile");
  auto slo = ParseModelConfig(base + "sampan { latency_slo_ms: 25.5 }", "config.pbtxt");
  ASSERT_TRUE(slo.ok()) << slo.status().ToString();
  EXPECT_DOUBLE_EQ(slo->sampan().latency_slo_ms(), 25.5);
  EXPECT_CONTAINS(ErrorOf(base + "sampan {\n  latency_slo_ms: -3\n}\n"),
                  "config.pbtxt:5:3: sampan.latency_slo_ms: must be a positive number of milliseconds");
}

TEST(ModelConfigTest, ValidateWithoutText) {
  ModelConfig c;
  c.set_name("m");
  c.set_max_batch_size(4);
  c.mutable_dynamic_batching()->add_preferred_batch_size(8);
  Status s = ValidateModelConfig(c, "built-in");
  EXPECT_EQ(s.message(), "built-in: dynamic_batching.preferred_batch_size[0]: 8 exceeds max_batch_size 4");
  c.mutable_dynamic_batching()->set_preferred_batch_size(0, 2);
  EXPECT_TRUE(ValidateModelConfig(c, "built-in").ok());
  EXPECT_FALSE(ValidateModelConfig(c, "built-in", "other").ok());
}

// --- robustness ------------------------------------------------------------

TEST(ModelConfigTest, GarbageNeverCrashes) {
  const std::string cases[] = {
      "",  // empty: parses, then fails on the missing name
      "{{{{",
      "}",
      "name: ",
      "name: \"unterminated",
      "input [ { name: \"x\" ",
      "\x01\x02\xff\xfe binary \x80",
      std::string("name: \"m\"\0 max_batch_size: 1", 27),
      std::string(10000, '{'),
      "input " + std::string(5000, '{'),
      "dims: [1, 2, 3]",
      "name: \"m\" dynamic_batching { priority_queue_policy { key: -1 } }",
      "name: 'm' max_batch_size: 0x7fffffff dynamic_batching { preferred_batch_size: 2147483647 }",
      "name: \"m\" input { name: \"x\" data_type: 999 dims: 1 }",
      "[sampan.serverconfig.ModelConfig.name]: \"x\"",
      std::string(1 << 20, 'a') + ": 1",  // a huge unknown field name
      "input { data_type: " + std::string(1 << 20, 'T') + " }",
  };
  for (const std::string& text : cases) {
    auto r = ParseModelConfig(text, "config.pbtxt");
    if (!r.ok()) {
      EXPECT_CONTAINS(r.status().message(), "config.pbtxt") << text.substr(0, 60);
    }
  }
  // Random mutations of a valid config.
  std::mt19937 rng(1234);
  const std::string good = kResNet;
  for (int round = 0; round < 2000; ++round) {
    std::string text = good;
    int edits = 1 + rng() % 4;
    for (int e = 0; e < edits; ++e) {
      size_t pos = rng() % text.size();
      switch (rng() % 3) {
        case 0:
          text[pos] = static_cast<char>(rng() % 256);
          break;
        case 1:
          text.erase(pos, 1 + rng() % 8);
          break;
        default:
          text.insert(pos, 1, "{}[]:\"-0,#"[rng() % 10]);
          break;
      }
      if (text.empty()) text.push_back('x');
    }
    auto r = ParseModelConfig(text, "config.pbtxt");
    if (!r.ok()) {
      ASSERT_TRUE(Contains(r.status().message(), "config.pbtxt")) << text;
    }
  }
}

// Ensembles: the DAG's shape is checked when the config is read (the composing models'
// inputs, outputs and types when the ensemble loads: tests/server/test_ensemble.py).
std::string Ensemble(const std::string& body, const std::string& head = "platform: \"ensemble\"\nmax_batch_size: 4\n") {
  return "name: \"e\"\n" + head +
         "input { name: \"IN\" data_type: TYPE_FP32 dims: [ 3 ] }\n"
         "output { name: \"OUT\" data_type: TYPE_FP32 dims: [ 3 ] }\n" +
         body;
}
const char* kTwoSteps = R"(ensemble_scheduling { step [
  { model_name: "a" model_version: -1 input_map { key: "x" value: "IN" } output_map { key: "y" value: "MID" } },
  { model_name: "b" input_map { key: "x" value: "MID" } output_map { key: "y" value: "OUT" } }
] })";

TEST(ModelConfigTest, EnsembleStepsFormAValidDag) {
  auto r = ParseModelConfig(Ensemble(kTwoSteps), "config.pbtxt", "e");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->ensemble_scheduling().step_size(), 2);
  EXPECT_EQ(r->ensemble_scheduling().step(0).input_map().at("x"), "IN");
  EXPECT_EQ(r->ensemble_scheduling().step(1).model_version(), 0);
}

TEST(ModelConfigTest, EnsembleMistakesNameTheFieldAndTheTensor) {
  EXPECT_CONTAINS(ErrorOf(Ensemble(kTwoSteps, "max_batch_size: 4\n")),
                  "ensemble_scheduling: needs platform: \"ensemble\"");
  EXPECT_CONTAINS(ErrorOf(Ensemble("")), "an ensemble needs at least one step");
  EXPECT_CONTAINS(ErrorOf(Ensemble(std::string(kTwoSteps) + "\ninstance_group { count: 2 }")),
                  "instance_group: is not used by an ensemble");
  EXPECT_CONTAINS(ErrorOf(Ensemble(std::string(kTwoSteps) + "\nsampan { precision: \"fp16\" }")),
                  "an ensemble takes only sampan.latency_slo_ms");
  // kTwoSteps with its first `from` replaced by `to`.
  auto with = [](const std::string& from, const std::string& to) {
    std::string t = kTwoSteps;
    return Ensemble(t.replace(t.find(from), from.size(), to));
  };
  // Two producers of one tensor; a step writing an ensemble input.
  EXPECT_CONTAINS(ErrorOf(with("value: \"MID\" } }", "value: \"OUT\" } }")),
                  "tensor 'OUT' is already written by step 0 (model 'a')");
  EXPECT_CONTAINS(ErrorOf(with("value: \"MID\" } }", "value: \"IN\" } }")),
                  "tensor 'IN' is an ensemble input; a step cannot write it");
  // An input nobody reads; an output nobody writes; a step running its own ensemble; a bad version.
  EXPECT_CONTAINS(ErrorOf(with("value: \"IN\"", "value: \"MID\"")), "input 'IN': is not read by any step");
  EXPECT_CONTAINS(ErrorOf(with("value: \"OUT\"", "value: \"OTHER\"")), "output 'OUT': is not written by any step");
  EXPECT_CONTAINS(ErrorOf(with("model_name: \"b\"", "model_name: \"e\"")),
                  "step[1].model_name: an ensemble cannot run itself");
  EXPECT_CONTAINS(ErrorOf(with("model_version: -1", "model_version: -3")),
                  "must be -1 (the newest ready version) or a version number, got -3");
}

}  // namespace
}  // namespace sampan::server
