// The REST front end over real loopback TCP against a Core test double:
// every endpoint, JSON and binary tensors (binary inputs wrap the body),
// Triton's status codes with JSON errors, keep-alive and pipelining, body
// limits, model control permissions, client disconnect -> cancellation,
// metrics-only listener and Stop() with a request in flight.
#include "server/http/http_server.h"

#include <gtest/gtest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

namespace sampan::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;

// One model, "double" (FP32 x[-1,-1] -> y = 2x, FP32 z = x + 1), answered on
// a worker thread the way the scheduler would.
class HttpTestCore final : public Core {
 public:
  HttpTestCore() {
    worker_ = std::thread([this] { Work(); });
  }
  ~HttpTestCore() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  bool Shutdown(std::chrono::milliseconds) override { return true; }
  bool Live() const override { return true; }
  bool Ready() const override { return ready; }
  bool ShuttingDown() const override { return false; }
  double Saturation() const override { return 0; }
  ServerMetadata GetServerMetadata() const override {
    ServerMetadata m;
    m.version = "0.1.0";
    m.extensions = {"binary_tensor_data", "statistics"};
    return m;
  }
  Status Known(const std::string& name, const std::string& version) const {
    if (name != "double") return NotFound("Request for unknown model: '", name, "' is not found");
    if (!version.empty() && version != "1") return NotFound("model 'double' has no version ", version);
    return Status::Ok();
  }
  Result<bool> ModelReady(const std::string& name, const std::string& version) const override {
    SP_RETURN_IF_ERROR(Known(name, version));
    return true;
  }
  Result<ModelMetadata> GetModelMetadata(const std::string& name, const std::string& version) const override {
    SP_RETURN_IF_ERROR(Known(name, version));
    ModelMetadata m;
    m.name = name;
    m.versions = {"1"};
    m.platform = "onnxruntime_onnx";
    m.inputs = {{"x", "FP32", {-1, -1}}};
    m.outputs = {{"y", "FP32", {-1, -1}}, {"z", "FP32", {-1, -1}}};
    return m;
  }
  Result<ModelConfig> GetModelConfig(const std::string& name, const std::string& version) const override {
    SP_RETURN_IF_ERROR(Known(name, version));
    ModelConfig c;
    c.set_name(name);
    c.set_platform("onnxruntime_onnx");
    c.set_max_batch_size(8);
    auto* in = c.add_input();
    in->set_name("x");
    in->set_data_type(serverconfig::TYPE_FP32);
    in->add_dims(-1);
    c.mutable_dynamic_batching()->set_max_queue_delay_microseconds(5000000000ull);
    (*c.mutable_parameters())["k"].set_string_value("v");
    return c;
  }

  void Infer(InferRequest request, InferCallback done) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_cancelled = request.cancelled;
      last_keepalive = request.keepalive;
      if (!request.inputs.empty()) last_input_data = request.inputs[0].data.raw();
      ++infer_calls;
    }
    if (Status s = Known(request.model_name, request.model_version); !s.ok()) return done(s);
    if (request.inputs.size() != 1 || request.inputs[0].name != "x")
      return done(InvalidArgument("model 'double' expects one input 'x'"));
    if (request.inputs[0].dtype != DType::kFloat32)
      return done(InvalidArgument("input 'x': expected FP32, got ", KServeDatatype(request.inputs[0].dtype)));
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({std::move(request), std::move(done)});
    cv_.notify_all();
  }

  Result<std::vector<ModelStats>> Statistics(const std::string& name, const std::string& version) const override {
    if (!name.empty()) SP_RETURN_IF_ERROR(Known(name, version));
    ModelStats s;
    s.name = "double";
    s.version = "1";
    s.inference_count = 7;
    s.execution_count = 3;
    s.inference_stats.success = {7, 7000};
    s.batch_stats.push_back({2, {1, 10}, {1, 20}, {1, 30}});
    s.memory_usage = {{"CPU", 0, 4096}, {"GPU", 1, 8192}};
    return std::vector<ModelStats>{s};
  }
  std::vector<RepositoryEntry> RepositoryIndex(bool ready_only) const override {
    std::vector<RepositoryEntry> e = {{"double", "1", ModelState::kReady, ""}};
    if (!ready_only) e.push_back({"broken", "1", ModelState::kUnavailable, "config.pbtxt:3:1: bad"});
    return e;
  }
  Status LoadModel(const std::string& name, const std::string& = "") override {
    std::lock_guard<std::mutex> lock(mu_);
    loads.push_back(name);
    if (name == "missing") return NotFound("no model 'missing' in the repository");
    return Status::Ok();
  }
  Status UnloadModel(const std::string& name, bool = false) override {
    return FailedPrecondition("model control mode is none");
  }
  std::string RenderMetrics() const override { return "# TYPE nv_inference_count counter\nnv_inference_count 7\n"; }

  std::atomic<bool> ready{true};
  std::atomic<int> delay_ms{0};
  std::mutex mu_;
  std::shared_ptr<std::atomic<bool>> last_cancelled;
  std::shared_ptr<void> last_keepalive;
  const void* last_input_data = nullptr;
  int infer_calls = 0;
  std::vector<std::string> loads;

 private:
  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return quit_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto [request, done] = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms.load());
      while (std::chrono::steady_clock::now() < deadline && !request.cancelled->load())
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (request.cancelled->load()) {
        done(Cancelled("request cancelled"));
      } else {
        const InferTensor& x = request.inputs[0];
        Tensor y = Tensor::Alloc(DType::kFloat32, x.shape), z = Tensor::Alloc(DType::kFloat32, x.shape);
        for (int64_t i = 0; i < x.data.numel(); ++i) {
          y.mutable_data<float>()[i] = 2 * x.data.data<float>()[i];
          z.mutable_data<float>()[i] = x.data.data<float>()[i] + 1;
        }
        InferResponse r;
        r.model_name = request.model_name;
        r.model_version = "1";
        r.id = request.id;
        std::vector<std::string> names = request.outputs.empty() ? std::vector<std::string>{"y", "z"} : request.outputs;
        for (const std::string& n : names) r.outputs.push_back({n, DType::kFloat32, x.shape, n == "y" ? y : z});
        done(std::move(r));
      }
      lock.lock();
    }
  }

  std::condition_variable cv_;
  std::deque<std::pair<InferRequest, InferCallback>> queue_;
  bool quit_ = false;
  std::thread worker_;
};

struct Reply {
  int status = 0;
  std::string body;
  std::string header_length;  // Inference-Header-Content-Length
  std::string content_type;
  std::string retry_after;
  bool keep_alive = true;
};

// A blocking HTTP/1.1 client on one connection.
class Client {
 public:
  explicit Client(int port) : socket_(ioc_) {
    socket_.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
  }
  void Send(bhttp::verb verb, const std::string& target, const std::string& body = "",
            const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    bhttp::request<bhttp::string_body> req(verb, target, 11);
    req.set(bhttp::field::host, "localhost");
    for (const auto& [k, v] : headers) req.set(k, v);
    req.body() = body;
    req.prepare_payload();
    bhttp::write(socket_, req);
  }
  Reply Receive() {
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(1ull << 30);
    beast::error_code ec;
    bhttp::read(socket_, buffer_, parser, ec);
    Reply r;
    if (ec) {
      r.status = -1;
      r.body = ec.message();
      return r;
    }
    auto& res = parser.get();
    r.status = res.result_int();
    r.body = res.body();
    r.header_length = std::string(res["Inference-Header-Content-Length"]);
    r.content_type = std::string(res[bhttp::field::content_type]);
    r.retry_after = std::string(res[bhttp::field::retry_after]);
    r.keep_alive = res.keep_alive();
    return r;
  }
  Reply Do(bhttp::verb verb, const std::string& target, const std::string& body = "",
           const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    Send(verb, target, body, headers);
    return Receive();
  }
  void WriteRaw(const std::string& bytes) { net::write(socket_, net::buffer(bytes)); }
  //! True when the server has closed the connection (reads EOF).
  bool ServerClosed() {
    beast::error_code ec;
    char c;
    socket_.read_some(net::buffer(&c, 1), ec);
    return ec == net::error::eof || ec == net::error::connection_reset;
  }
  tcp::socket& socket() { return socket_; }

 private:
  net::io_context ioc_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
};

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\n  text:  " << text << "\n  lacks: " << part;
}
#define EXPECT_CONTAINS(text, part) EXPECT_TRUE(Contains((text), (part)))

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpOptions options = {}) {
    options.address = "127.0.0.1";
    options.port = 0;
    auto server = HttpServer::Start(&core_, options);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    ASSERT_GT(server_->port(), 0);
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  // A binary-extension request for x (shape [1, n]) with outputs as given.
  static std::pair<std::string, std::string> BinaryRequest(const std::vector<float>& x, const std::string& outputs) {
    std::string json = R"({"id":"b1","inputs":[{"name":"x","datatype":"FP32","shape":[1,)" + std::to_string(x.size()) +
                       R"(],"parameters":{"binary_data_size":)" + std::to_string(x.size() * 4) + "}}]" + outputs + "}";
    return {json + Floats(x), std::to_string(json.size())};
  }

  HttpTestCore core_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, HealthMetadataConfigStatsIndex) {
  StartServer();
  Client c(server_->port());
  EXPECT_EQ(c.Do(bhttp::verb::get, "/v2/health/live").status, 200);
  EXPECT_EQ(c.Do(bhttp::verb::get, "/v2/health/ready").status, 200);
  core_.ready = false;
  Reply r = c.Do(bhttp::verb::get, "/v2/health/ready");
  EXPECT_EQ(r.status, 400);
  EXPECT_CONTAINS(r.body, R"({"error":"server is not ready"})");
  core_.ready = true;

  r = c.Do(bhttp::verb::get, "/v2");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"name":"sampan","version":"0.1.0","extensions":["binary_tensor_data","statistics"]})");
  EXPECT_EQ(r.content_type, "application/json");

  r = c.Do(bhttp::verb::get, "/v2/models/double");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(
      r.body,
      R"({"name":"double","versions":["1"],"platform":"onnxruntime_onnx",)"
      R"("inputs":[{"name":"x","datatype":"FP32","shape":[-1,-1]}],)"
      R"("outputs":[{"name":"y","datatype":"FP32","shape":[-1,-1]},{"name":"z","datatype":"FP32","shape":[-1,-1]}]})");
  EXPECT_EQ(c.Do(bhttp::verb::get, "/v2/models/double/versions/1").status, 200);
  // Percent-encoded names are decoded (tritonclient quotes them).
  EXPECT_EQ(c.Do(bhttp::verb::get, "/v2/models/%64ouble/ready").status, 200);
  r = c.Do(bhttp::verb::get, "/v2/models/nope");
  EXPECT_EQ(r.status, 404);
  EXPECT_CONTAINS(r.body, R"({"error":"Request for unknown model: 'nope' is not found"})");
  EXPECT_EQ(c.Do(bhttp::verb::get, "/v2/models/double/versions/2").status, 404);
  EXPECT_EQ(c.Do(bhttp::verb::get, "/v2/models/nope/ready").status, 400);  // Triton: not ready

  r = c.Do(bhttp::verb::get, "/v2/models/double/config");
  EXPECT_EQ(r.status, 200);
  // Proto field names, defaults printed, int64 as numbers, enums as names, maps as objects.
  EXPECT_CONTAINS(r.body, R"("name":"double","platform":"onnxruntime_onnx","max_batch_size":8,)");
  EXPECT_CONTAINS(r.body, R"("input":[{"name":"x","data_type":"TYPE_FP32","format":"FORMAT_NONE","dims":[-1],)");
  EXPECT_CONTAINS(r.body, R"("output":[])");
  EXPECT_CONTAINS(r.body, R"("max_queue_delay_microseconds":5000000000,)");
  EXPECT_CONTAINS(r.body, R"("parameters":{"k":{"string_value":"v"}})");
  EXPECT_EQ(r.body.find("version_policy"), std::string::npos);  // unset message: absent

  r = c.Do(bhttp::verb::get, "/v2/models/stats");
  EXPECT_EQ(r.status, 200);
  EXPECT_CONTAINS(r.body, R"({"model_stats":[{"name":"double","version":"1","last_inference":0,"inference_count":7,)"
                          R"("execution_count":3,"inference_stats":{"success":{"count":7,"ns":7000},)");
  EXPECT_CONTAINS(r.body, R"("batch_stats":[{"batch_size":2,"compute_input":{"count":1,"ns":10},)");
  EXPECT_CONTAINS(r.body, R"("memory_usage":[{"type":"CPU","id":0,"byte_size":4096},)"
                          R"({"type":"GPU","id":1,"byte_size":8192}]})");
  EXPECT_EQ(c.Do(bhttp::verb::get, "/v2/models/double/versions/1/stats").status, 200);
  EXPECT_EQ(c.Do(bhttp::verb::get, "/v2/models/nope/stats").status, 404);

  r = c.Do(bhttp::verb::post, "/v2/repository/index", R"({"ready":false})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"([{"name":"double","version":"1","state":"READY"},)"
                    R"({"name":"broken","version":"1","state":"UNAVAILABLE","reason":"config.pbtxt:3:1: bad"}])");
  r = c.Do(bhttp::verb::post, "/v2/repository/index", R"({"ready":true})");
  EXPECT_EQ(r.body, R"([{"name":"double","version":"1","state":"READY"}])");
  EXPECT_EQ(c.Do(bhttp::verb::post, "/v2/repository/index", "").status, 200);

  // Unknown routes and wrong methods.
  r = c.Do(bhttp::verb::get, "/v2/nothing/here");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body, R"({"error":"Not Found"})");
  EXPECT_EQ(c.Do(bhttp::verb::get, "/v2/models/double/versions/x").status, 404);
  EXPECT_EQ(c.Do(bhttp::verb::get, "/v2/models/double/").status, 404);
  EXPECT_EQ(c.Do(bhttp::verb::get, "/metrics").status, 404);
  r = c.Do(bhttp::verb::post, "/v2/health/live");
  EXPECT_EQ(r.status, 405);
  EXPECT_CONTAINS(r.body, "Method Not Allowed");
  EXPECT_EQ(c.Do(bhttp::verb::get, "/v2/models/double/infer").status, 405);
  EXPECT_EQ(c.Do(bhttp::verb::get, "/v2/repository/index").status, 405);
}

TEST_F(HttpServerTest, InferJsonNestedAndFlatData) {
  StartServer();
  Client c(server_->port());
  Reply r = c.Do(bhttp::verb::post, "/v2/models/double/infer",
                 R"({"id":"r1","inputs":[{"name":"x","datatype":"FP32","shape":[2,2],"data":[[1,2.5],[-3,1e-3]]}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(r.header_length.empty());
  EXPECT_EQ(r.body, R"({"model_name":"double","model_version":"1","id":"r1","outputs":[)"
                    R"({"name":"y","datatype":"FP32","shape":[2,2],"data":[2,5,-6,0.002]},)"
                    R"({"name":"z","datatype":"FP32","shape":[2,2],"data":[2,3.5,-2,1.001]}]})");
  // Flat data, one output asked for, via the versioned URL.
  r = c.Do(bhttp::verb::post, "/v2/models/double/versions/1/infer",
           R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,3],"data":[1,2,3]}],"outputs":[{"name":"z"}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, R"({"model_name":"double","model_version":"1","outputs":[)"
                    R"({"name":"z","datatype":"FP32","shape":[1,3],"data":[2,3,4]}]})");
}

TEST_F(HttpServerTest, InferBinaryInputsWrapTheBodyAndOutputsComeBackBinary) {
  StartServer();
  Client c(server_->port());
  const std::vector<float> x = {1, 2, 3, 4, 5};
  auto [body, header_length] =
      BinaryRequest(x, R"(,"outputs":[{"name":"y","parameters":{"binary_data":true}},{"name":"z"}])");
  Reply r = c.Do(bhttp::verb::post, "/v2/models/double/infer", body,
                 {{"Inference-Header-Content-Length", header_length}, {"Content-Type", "application/octet-stream"}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_FALSE(r.header_length.empty());
  const size_t json_size = std::stoul(r.header_length);
  const std::string json = r.body.substr(0, json_size);
  EXPECT_EQ(json, R"({"model_name":"double","model_version":"1","id":"b1","outputs":[)"
                  R"({"name":"y","datatype":"FP32","shape":[1,5],"parameters":{"binary_data_size":20}},)"
                  R"({"name":"z","datatype":"FP32","shape":[1,5],"data":[2,3,4,5,6]}]})");
  EXPECT_EQ(r.body.substr(json_size), Floats({2, 4, 6, 8, 10}));
  {
    // The input tensor pointed into the request body, 64-byte aligned.
    std::lock_guard<std::mutex> lock(core_.mu_);
    ASSERT_NE(core_.last_keepalive, nullptr);
    const char* block = static_cast<const char*>(core_.last_keepalive.get());
    const char* data = static_cast<const char*>(core_.last_input_data);
    EXPECT_GE(data, block);
    EXPECT_LT(data, block + 64 + body.size());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % 64, 0u);
  }
  // binary_data_output makes every output binary.
  auto [body2, hl2] = BinaryRequest(x, R"(,"parameters":{"binary_data_output":true})");
  r = c.Do(bhttp::verb::post, "/v2/models/double/infer", body2, {{"Inference-Header-Content-Length", hl2}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body.substr(std::stoul(r.header_length)), Floats({2, 4, 6, 8, 10}) + Floats({2, 3, 4, 5, 6}));
}

TEST_F(HttpServerTest, BadRequestsGetTheRightStatusAndTheServerKeepsServing) {
  HttpOptions options;
  options.max_body_bytes = 4096;
  StartServer(options);
  Client c(server_->port());
  const std::string url = "/v2/models/double/infer";
  struct Case {
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
    int status;
    std::string message;
  };
  const std::string x = R"({"name":"x","datatype":"FP32","shape":[1,2],)";
  const std::string truncated = "{\"inputs\":[" + x + R"("parameters":{"binary_data_size":8}}]})";
  std::vector<Case> cases = {
      {R"({"inputs":[)", {}, 400, "malformed JSON in request body at byte 11"},
      {R"([1,2])", {}, 400, "request body must be a JSON object"},
      {R"({"outputs":[]})", {}, 400, "request has no 'inputs'"},
      {"{\"inputs\":[" + x + R"("data":[1,2,3]}]})", {}, 400, "input 'x': 'data' has more than the 2 elements"},
      {"{\"inputs\":[" + x + R"("data":[1]}]})", {}, 400, "input 'x': 'data' has 1 elements, its shape holds 2"},
      {"{\"inputs\":[" + x + R"("data":[1,"a"]}]})",
       {},
       400,
       "input 'x': data element 1 is a string, expected a number"},
      {R"({"inputs":[{"name":"x","datatype":"FP33","shape":[1],"data":[1]}]})", {}, 400, "unknown datatype 'FP33'"},
      {R"({"inputs":[{"name":"x","datatype":"BYTES","shape":[1],"data":["a"]}]})", {}, 400, "expected FP32, got BYTES"},
      {R"({"inputs":[{"name":"x","datatype":"INT32","shape":[1],"data":[1]}]})", {}, 400, "expected FP32, got INT32"},
      {R"({"inputs":[{"name":"x","datatype":"INT8","shape":[1],"data":[300]}]})",
       {},
       400,
       "(300) is out of range for INT8"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[-1],"data":[1]}]})",
       {},
       400,
       "'shape' must hold non-negative"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[100000000],"data":[1]}]})",
       {},
       400,
       "more than 'data' can have"},
      {truncated + std::string(5, 'a'),
       {{"Inference-Header-Content-Length", std::to_string(truncated.size())}},
       400,
       "binary data truncated: needs 8 bytes at offset 0 of the binary part, which holds only 5"},
      {"{\"inputs\":[" + x + R"("parameters":{"binary_data_size":4}}]})", {}, 400, "binary_data_size is 4 bytes"},
      {"{\"inputs\":[" + x + R"("data":[1,2]}]})",
       {{"Inference-Header-Content-Length", "x"}},
       400,
       "is not a byte count"},
      {"{\"inputs\":[" + x + R"("data":[1,2]}],"outputs":[{"name":"y","parameters":{"classification":2}}]})",
       {},
       501,
       "classification extension is not supported"},
  };
  for (const Case& k : cases) {
    Reply r = c.Do(bhttp::verb::post, url, k.body, k.headers);
    EXPECT_EQ(r.status, k.status) << k.body << " -> " << r.body;
    EXPECT_CONTAINS(r.body, k.message);
    EXPECT_EQ(r.body.rfind("{\"error\":\"", 0), 0u) << r.body;
  }
  Reply r = c.Do(bhttp::verb::post, "/v2/models/nope/infer", "{\"inputs\":[" + x + R"("data":[1,2]}]})");
  EXPECT_EQ(r.status, 404);
  EXPECT_CONTAINS(r.body, "unknown model: 'nope'");
  r = c.Do(bhttp::verb::post, "/v2/models/double/versions/7/infer", "{\"inputs\":[" + x + R"("data":[1,2]}]})");
  EXPECT_EQ(r.status, 404);

  // The same connection still serves a good request.
  const std::string good = "{\"inputs\":[" + x + R"("data":[1,2]}],"outputs":[{"name":"y"}]})";
  r = c.Do(bhttp::verb::post, url, good);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_CONTAINS(r.body, R"("data":[2,4])");

  // Oversized body: answered, then the connection is closed cleanly.
  {
    Client big(server_->port());
    r = big.Do(bhttp::verb::post, url, std::string(5000, ' '));
    EXPECT_EQ(r.status, 400);
    EXPECT_CONTAINS(r.body, "request body of 5000 bytes exceeds the server's limit of 4096 bytes");
    EXPECT_FALSE(r.keep_alive);
    EXPECT_TRUE(big.ServerClosed());
  }
  // Compressed bodies are refused.
  {
    Client gz(server_->port());
    r = gz.Do(bhttp::verb::post, url, good, {{"Content-Encoding", "gzip"}});
    EXPECT_EQ(r.status, 400);
    EXPECT_CONTAINS(r.body, "unsupported Content-Encoding 'gzip'");
  }
  // Garbage instead of HTTP.
  {
    Client junk(server_->port());
    junk.WriteRaw("HELLO\r\n\r\n");
    r = junk.Receive();
    EXPECT_EQ(r.status, 400);
    EXPECT_CONTAINS(r.body, "malformed HTTP request");
  }
  Client fresh(server_->port());
  EXPECT_EQ(fresh.Do(bhttp::verb::post, url, good).status, 200);
}

TEST_F(HttpServerTest, KeepAliveAndPipelinedRequestsAnswerInOrder) {
  StartServer();
  Client c(server_->port());
  core_.delay_ms = 30;  // the first answer comes late; the second must still follow it
  std::string pipelined;
  for (int i = 0; i < 3; ++i) {
    const std::string body = R"({"id":"p)" + std::to_string(i) +
                             R"(","inputs":[{"name":"x","datatype":"FP32","shape":[1,1],"data":[)" + std::to_string(i) +
                             R"(]}],"outputs":[{"name":"y"}]})";
    pipelined += "POST /v2/models/double/infer HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
                 "\r\n\r\n" + body;
  }
  pipelined += "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n";
  c.WriteRaw(pipelined);
  for (int i = 0; i < 3; ++i) {
    Reply r = c.Receive();
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_CONTAINS(r.body, R"("id":"p)" + std::to_string(i) + R"(")");
    EXPECT_CONTAINS(r.body, "\"data\":[" + std::to_string(2 * i) + "]");
    EXPECT_TRUE(r.keep_alive);
  }
  EXPECT_EQ(c.Receive().status, 200);
  // Connection: close is honoured.
  Reply r = c.Do(bhttp::verb::get, "/v2/health/live", "", {{"Connection", "close"}});
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.keep_alive);
  EXPECT_TRUE(c.ServerClosed());
}

TEST_F(HttpServerTest, ClientDisconnectCancelsTheRequest) {
  StartServer();
  core_.delay_ms = 5000;
  {
    Client c(server_->port());
    c.Send(bhttp::verb::post, "/v2/models/double/infer",
           R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,1],"data":[1]}]})");
    for (int i = 0; i < 2000; ++i) {  // up to 10 s: a loaded 2-core CI machine can take over 1 s
      std::lock_guard<std::mutex> lock(core_.mu_);
      if (core_.infer_calls == 1) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }  // the client goes away
  std::shared_ptr<std::atomic<bool>> cancelled;
  {
    std::lock_guard<std::mutex> lock(core_.mu_);
    cancelled = core_.last_cancelled;
  }
  ASSERT_NE(cancelled, nullptr);
  for (int i = 0; i < 200 && !cancelled->load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(cancelled->load());
  core_.delay_ms = 0;
  Client c(server_->port());
  EXPECT_EQ(c.Do(bhttp::verb::get, "/v2/health/live").status, 200);
}

TEST_F(HttpServerTest, ModelControlNeedsLoopbackAndTheBearerToken) {
  HttpOptions options;
  options.model_control_token = "s3cret";
  StartServer(options);
  Client c(server_->port());
  Reply r = c.Do(bhttp::verb::post, "/v2/repository/models/double/load");
  EXPECT_EQ(r.status, 401);
  EXPECT_CONTAINS(r.body, "requires 'Authorization: Bearer <token>'");
  r = c.Do(bhttp::verb::post, "/v2/repository/models/double/load", "", {{"Authorization", "Bearer wrong!"}});
  EXPECT_EQ(r.status, 403);
  EXPECT_CONTAINS(r.body, "token is not valid");
  r = c.Do(bhttp::verb::post, "/v2/repository/models/double/load", "", {{"Authorization", "Bearer s3cret"}});
  EXPECT_EQ(r.status, 200) << r.body;
  r = c.Do(bhttp::verb::post, "/v2/repository/models/missing/load", "{}", {{"Authorization", "bearer s3cret"}});
  EXPECT_EQ(r.status, 404);
  EXPECT_CONTAINS(r.body, "no model 'missing'");
  r = c.Do(bhttp::verb::post, "/v2/repository/models/double/load", R"({"parameters":{"file:1/model.onnx":"b25ueA=="}})",
           {{"Authorization", "Bearer s3cret"}});
  EXPECT_EQ(r.status, 501);
  EXPECT_CONTAINS(r.body, "load parameter 'file:1/model.onnx' is not supported");
  r = c.Do(bhttp::verb::post, "/v2/repository/models/double/load", R"({"parameters":{"config":{"name":"double"}}})",
           {{"Authorization", "Bearer s3cret"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_CONTAINS(r.body, "load parameter 'config' must be a string");
  // tritonclient sends unload_dependents; control mode none maps to 503 as in Triton.
  r = c.Do(bhttp::verb::post, "/v2/repository/models/double/unload", R"({"parameters":{"unload_dependents":false}})",
           {{"Authorization", "Bearer s3cret"}});
  EXPECT_EQ(r.status, 503);
  EXPECT_CONTAINS(r.body, "model control mode is none");
  // Every 503 says when to come back, not only a shed inference's (Respond adds it); others do not.
  EXPECT_EQ(r.retry_after, "1");
  EXPECT_EQ(c.Do(bhttp::verb::post, "/v2/repository/models/missing/load", "{}", {{"Authorization", "Bearer s3cret"}})
                .retry_after,
            "");
  std::lock_guard<std::mutex> lock(core_.mu_);
  EXPECT_EQ(core_.loads, (std::vector<std::string>{"double", "missing", "missing"}));
}

TEST_F(HttpServerTest, MetricsOnlyListener) {
  HttpOptions options;
  options.metrics_only = true;
  StartServer(options);
  Client c(server_->port());
  Reply r = c.Do(bhttp::verb::get, "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(r.body, "# TYPE nv_inference_count counter\nnv_inference_count 7\n");
  EXPECT_EQ(c.Do(bhttp::verb::get, "/v2/health/live").status, 404);
}

TEST_F(HttpServerTest, StopLetsAnInFlightRequestFinishAndBusyPortFails) {
  StartServer();
  HttpOptions same;
  same.address = "127.0.0.1";
  same.port = server_->port();
  auto clash = HttpServer::Start(&core_, same);
  ASSERT_FALSE(clash.ok());
  EXPECT_CONTAINS(clash.status().message(), "cannot listen for HTTP on 127.0.0.1:" + std::to_string(same.port));

  core_.delay_ms = 200;
  Client idle(server_->port());
  EXPECT_EQ(idle.Do(bhttp::verb::get, "/v2/health/live").status, 200);
  Client busy(server_->port());
  busy.Send(bhttp::verb::post, "/v2/models/double/infer",
            R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,1],"data":[4]}],"outputs":[{"name":"y"}]})");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::thread stopper([&] { server_->Stop(); });
  Reply r = busy.Receive();
  stopper.join();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_CONTAINS(r.body, "\"data\":[8]");
  EXPECT_FALSE(r.keep_alive);
  EXPECT_TRUE(idle.ServerClosed());
}

}  // namespace
}  // namespace sampan::server
