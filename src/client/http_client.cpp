// KServe v2 over HTTP/1.1 keep-alive (Boost.Beast, synchronous: one client per
// worker thread) with the binary tensor data extension for inputs and outputs.
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstring>
#include <string_view>

#include "client/client.h"

namespace sampan::client {

namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

size_t DatatypeSize(const std::string& dt) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1},   {"UINT8", 1}, {"INT8", 1}, {"UINT16", 2}, {"INT16", 2}, {"FP16", 2}, {"BF16", 2},
      {"UINT32", 4}, {"INT32", 4}, {"FP32", 4}, {"UINT64", 8}, {"INT64", 8}, {"FP64", 8}};
  auto it = sizes.find(dt);
  return it == sizes.end() ? 0 : it->second;
}

Status ParseHostPort(const std::string& url, int default_port, std::string* host, int* port) {
  std::string u = url;
  for (const char* scheme : {"http://", "grpc://"})
    if (u.rfind(scheme, 0) == 0) u = u.substr(std::strlen(scheme));
  while (!u.empty() && u.back() == '/') u.pop_back();
  if (u.empty()) return InvalidArgument("empty server URL");
  auto colon = u.rfind(':');
  if (colon == std::string::npos) {
    *host = u;
    *port = default_port;
    return Status::Ok();
  }
  *host = u.substr(0, colon);
  const std::string p = u.substr(colon + 1);
  char* end = nullptr;
  long v = std::strtol(p.c_str(), &end, 10);
  if (p.empty() || *end != '\0' || v < 1 || v > 65535)
    return InvalidArgument("bad port '", p, "' in server URL '", url, "' (want HOST:PORT)");
  *port = static_cast<int>(v);
  if (host->empty()) *host = "localhost";
  return Status::Ok();
}

namespace {

std::vector<int64_t> ShapeOf(const rapidjson::Value& v) {
  std::vector<int64_t> s;
  if (v.IsArray())
    for (const auto& d : v.GetArray()) s.push_back(d.IsInt64() ? d.GetInt64() : -1);
  return s;
}

std::string ErrorFromBody(const std::string& body) {
  rapidjson::Document d;
  d.Parse(body.data(), body.size());
  if (!d.HasParseError() && d.IsObject() && d.HasMember("error") && d["error"].IsString())
    return d["error"].GetString();
  return body.substr(0, 300);
}

Status StatusFromHttp(unsigned code, const std::string& body, const std::string& what) {
  const std::string msg = StrCat(what, ": HTTP ", code, ": ", ErrorFromBody(body));
  if (code == 404) return NotFound(msg);
  if (code == 503) return Unavailable(msg);
  if (code >= 500) return Internal(msg);
  return InvalidArgument(msg);
}

class HttpPrepared : public PreparedRequest {
 public:
  std::string target;
  std::string body;
  size_t header_length = 0;
};

class HttpClient : public Client {
 public:
  HttpClient(std::string host, int port) : host_(std::move(host)), port_(port), socket_(ioc_) {}

  Status Connect() {
    beast::error_code ec;
    tcp::resolver resolver(ioc_);
    auto results = resolver.resolve(host_, std::to_string(port_), ec);
    if (ec) return Unavailable("cannot resolve '", host_, "': ", ec.message());
    socket_ = tcp::socket(ioc_);
    asio::connect(socket_, results, ec);
    if (ec) return Unavailable("cannot connect to ", host_, ":", port_, ": ", ec.message());
    socket_.set_option(tcp::no_delay(true), ec);
    connected_ = true;
    return Status::Ok();
  }

  // One request/response on the keep-alive connection; reconnects once when the
  // server closed an idle connection.
  Status Roundtrip(http::verb verb, const std::string& target, const std::string& body, size_t header_length,
                   http::response<http::string_body>* res) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (!connected_) SP_RETURN_IF_ERROR(Connect());
      http::request<http::string_body> req{verb, target, 11};
      req.set(http::field::host, host_);
      req.keep_alive(true);
      if (verb == http::verb::post) {
        req.set(http::field::content_type, header_length ? "application/octet-stream" : "application/json");
        if (header_length) req.set("Inference-Header-Content-Length", std::to_string(header_length));
        req.body() = body;
        req.prepare_payload();
      }
      beast::error_code ec;
      http::write(socket_, req, ec);
      if (!ec) {
        http::response_parser<http::string_body> parser;
        parser.body_limit(1ull << 31);
        http::read(socket_, buffer_, parser, ec);
        if (!ec) {
          *res = parser.release();
          if (!res->keep_alive()) Close();
          return Status::Ok();
        }
      }
      Close();
      if (attempt == 1) return Unavailable("HTTP ", target, ": ", ec.message());
    }
    return Internal("unreachable");
  }

  void Close() {
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    buffer_.clear();
    connected_ = false;
  }

  Result<bool> ServerReady() override {
    http::response<http::string_body> res;
    SP_RETURN_IF_ERROR(Roundtrip(http::verb::get, "/v2/health/ready", "", 0, &res));
    return res.result_int() == 200;
  }

  static std::string ModelPath(const std::string& name, const std::string& version) {
    return "/v2/models/" + name + (version.empty() ? "" : "/versions/" + version);
  }

  Result<ModelInfo> GetModel(const std::string& name, const std::string& version) override {
    http::response<http::string_body> res;
    SP_RETURN_IF_ERROR(Roundtrip(http::verb::get, ModelPath(name, version), "", 0, &res));
    if (res.result_int() != 200) return StatusFromHttp(res.result_int(), res.body(), "model metadata");
    rapidjson::Document d;
    d.Parse(res.body().data(), res.body().size());
    if (d.HasParseError() || !d.IsObject()) return InvalidArgument("model metadata: the server sent invalid JSON");
    ModelInfo info;
    info.name = d.HasMember("name") && d["name"].IsString() ? d["name"].GetString() : name;
    if (d.HasMember("platform") && d["platform"].IsString()) info.platform = d["platform"].GetString();
    if (d.HasMember("versions") && d["versions"].IsArray())
      for (const auto& v : d["versions"].GetArray())
        if (v.IsString()) info.versions.push_back(v.GetString());
    for (const char* key : {"inputs", "outputs"}) {
      if (!d.HasMember(key) || !d[key].IsArray()) continue;
      for (const auto& t : d[key].GetArray()) {
        if (!t.IsObject() || !t.HasMember("name") || !t["name"].IsString()) continue;
        TensorSpec s;
        s.name = t["name"].GetString();
        if (t.HasMember("datatype") && t["datatype"].IsString()) s.datatype = t["datatype"].GetString();
        if (t.HasMember("shape")) s.shape = ShapeOf(t["shape"]);
        (key[0] == 'i' ? info.inputs : info.outputs).push_back(std::move(s));
      }
    }
    // max_batch_size lives in the config.
    SP_RETURN_IF_ERROR(Roundtrip(http::verb::get, ModelPath(name, version) + "/config", "", 0, &res));
    if (res.result_int() == 200) {
      rapidjson::Document c;
      c.Parse(res.body().data(), res.body().size());
      if (!c.HasParseError() && c.IsObject() && c.HasMember("max_batch_size") && c["max_batch_size"].IsInt64())
        info.max_batch_size = c["max_batch_size"].GetInt64();
      if (!c.HasParseError() && c.IsObject() && c.HasMember("sequence_batching") && c["sequence_batching"].IsObject()) {
        info.sequence = true;
        const auto& sb = c["sequence_batching"];
        if (sb.HasMember("control_input") && sb["control_input"].IsArray())
          for (const auto& ci : sb["control_input"].GetArray()) {
            if (!ci.IsObject() || !ci.HasMember("control") || !ci["control"].IsArray()) continue;
            for (const auto& ctl : ci["control"].GetArray())
              if (ctl.IsObject() && ctl.HasMember("kind") && ctl["kind"].IsString() &&
                  std::string_view(ctl["kind"].GetString()) == "CONTROL_SEQUENCE_CORRID" &&
                  ctl.HasMember("data_type") && ctl["data_type"].IsString() &&
                  std::string_view(ctl["data_type"].GetString()) == "TYPE_STRING")
                info.string_sequence_id = true;
          }
      }
    }
    return info;
  }

  Result<ModelStats> GetStats(const std::string& name, const std::string& version) override {
    http::response<http::string_body> res;
    SP_RETURN_IF_ERROR(Roundtrip(http::verb::get, ModelPath(name, version) + "/stats", "", 0, &res));
    if (res.result_int() != 200) return StatusFromHttp(res.result_int(), res.body(), "model statistics");
    rapidjson::Document d;
    d.Parse(res.body().data(), res.body().size());
    if (d.HasParseError() || !d.IsObject() || !d.HasMember("model_stats") || !d["model_stats"].IsArray())
      return InvalidArgument("model statistics: the server sent unexpected JSON");
    ModelStats s;
    auto u64 = [](const rapidjson::Value& o, const char* k) -> uint64_t {
      if (!o.IsObject() || !o.HasMember(k)) return 0;
      const auto& v = o[k];
      if (v.IsUint64()) return v.GetUint64();
      if (v.IsString()) return std::strtoull(v.GetString(), nullptr, 10);  // proto3 JSON writes u64 as strings
      return 0;
    };
    for (const auto& m : d["model_stats"].GetArray()) {
      s.inference_count += u64(m, "inference_count");
      s.execution_count += u64(m, "execution_count");
      if (!m.HasMember("inference_stats")) continue;
      const auto& is = m["inference_stats"];
      auto dur = [&](const char* k, uint64_t* count, uint64_t* ns) {
        if (!is.IsObject() || !is.HasMember(k)) return;
        *count += u64(is[k], "count");
        *ns += u64(is[k], "ns");
      };
      dur("success", &s.success_count, &s.success_ns);
      dur("fail", &s.fail_count, &s.fail_ns);
      dur("queue", &s.queue_count, &s.queue_ns);
      dur("compute_input", &s.compute_input_count, &s.compute_input_ns);
      dur("compute_infer", &s.compute_infer_count, &s.compute_infer_ns);
      dur("compute_output", &s.compute_output_count, &s.compute_output_ns);
    }
    return s;
  }

  Result<std::unique_ptr<PreparedRequest>> Prepare(const std::string& model, const std::string& version,
                                                   const std::vector<InputData>& inputs,
                                                   const std::vector<std::string>& outputs) override {
    auto p = std::make_unique<HttpPrepared>();
    p->target = ModelPath(model, version) + "/infer";
    rapidjson::StringBuffer sb;
    rapidjson::Writer<rapidjson::StringBuffer> w(sb);
    w.StartObject();
    w.Key("inputs");
    w.StartArray();
    size_t binary = 0;
    for (const auto& in : inputs) {
      w.StartObject();
      w.Key("name");
      w.String(in.name.c_str());
      w.Key("datatype");
      w.String(in.datatype.c_str());
      w.Key("shape");
      w.StartArray();
      for (int64_t d : in.shape) w.Int64(d);
      w.EndArray();
      w.Key("parameters");
      w.StartObject();
      if (!in.shm_region.empty()) {
        w.Key("shared_memory_region");
        w.String(in.shm_region.c_str());
        w.Key("shared_memory_byte_size");
        w.Uint64(in.shm_byte_size);
        if (in.shm_offset) {
          w.Key("shared_memory_offset");
          w.Uint64(in.shm_offset);
        }
      } else {
        w.Key("binary_data_size");
        w.Uint64(in.bytes.size());
        binary += in.bytes.size();
      }
      w.EndObject();
      w.EndObject();
    }
    w.EndArray();
    if (!outputs.empty()) {
      w.Key("outputs");
      w.StartArray();
      for (const auto& o : outputs) {
        w.StartObject();
        w.Key("name");
        w.String(o.c_str());
        w.Key("parameters");
        w.StartObject();
        w.Key("binary_data");
        w.Bool(true);
        w.EndObject();
        w.EndObject();
      }
      w.EndArray();
    }
    w.Key("parameters");
    w.StartObject();
    w.Key("binary_data_output");
    w.Bool(true);
    w.EndObject();
    w.EndObject();
    p->header_length = sb.GetSize();
    p->body.reserve(sb.GetSize() + binary);
    p->body.append(sb.GetString(), sb.GetSize());
    for (const auto& in : inputs)
      if (in.shm_region.empty()) p->body += in.bytes;
    return std::unique_ptr<PreparedRequest>(std::move(p));
  }

  Status Infer(const PreparedRequest& request, std::vector<OutputData>* outputs) override {
    const auto& p = static_cast<const HttpPrepared&>(request);
    return Post(p.target, p.body, p.header_length, outputs);
  }

  Status InferStep(const PreparedRequest& request, const SequenceStep& step,
                   std::vector<OutputData>* outputs) override {
    const auto& p = static_cast<const HttpPrepared&>(request);
    // The prepared JSON header ends with the request's parameters object and the top-level
    // object: `...}}`. The step's parameters join the first.
    if (p.header_length < 2 || p.body.compare(p.header_length - 2, 2, "}}") != 0)
      return Internal("prepared HTTP request has an unexpected header");
    const std::string id = step.id_is_string ? StrCat("\"", step.id, "\"") : StrCat(step.id);
    std::string body = p.body.substr(0, p.header_length - 2);
    body += StrCat(",\"sequence_id\":", id, ",\"sequence_start\":", step.start ? "true" : "false",
                   ",\"sequence_end\":", step.end ? "true" : "false", "}}");
    const size_t header_length = body.size();
    body.append(p.body, p.header_length, std::string::npos);
    return Post(p.target, body, header_length, outputs);
  }

  static Status ParseInferResponse(const http::response<http::string_body>& res, std::vector<OutputData>* outputs) {
    const std::string& body = res.body();
    size_t header_len = body.size();
    auto it = res.find("Inference-Header-Content-Length");
    if (it != res.end()) {
      header_len = std::strtoull(std::string(it->value()).c_str(), nullptr, 10);
      if (header_len > body.size()) return InvalidArgument("infer response: header length beyond the body");
    }
    rapidjson::Document d;
    d.Parse(body.data(), header_len);
    if (d.HasParseError() || !d.IsObject() || !d.HasMember("outputs") || !d["outputs"].IsArray())
      return InvalidArgument("infer response: invalid JSON");
    size_t offset = header_len;
    outputs->clear();
    for (const auto& o : d["outputs"].GetArray()) {
      OutputData out;
      if (!o.IsObject() || !o.HasMember("name") || !o["name"].IsString())
        return InvalidArgument("infer response: output without a name");
      out.name = o["name"].GetString();
      if (o.HasMember("datatype") && o["datatype"].IsString()) out.datatype = o["datatype"].GetString();
      if (o.HasMember("shape")) out.shape = ShapeOf(o["shape"]);
      const size_t esize = DatatypeSize(out.datatype);
      if (o.HasMember("parameters") && o["parameters"].IsObject() && o["parameters"].HasMember("binary_data_size")) {
        const uint64_t n = o["parameters"]["binary_data_size"].GetUint64();
        if (offset + n > body.size()) return InvalidArgument("infer response: binary data beyond the body");
        out.bytes.assign(body.data() + offset, n);
        offset += n;
      } else if (o.HasMember("data") && o["data"].IsArray() && esize) {
        // JSON data: only what perf needs (numbers), converted to the datatype's bytes.
        for (const auto& v : o["data"].GetArray()) {
          char buf[8] = {};
          if (out.datatype == "FP32") {
            float f = static_cast<float>(v.GetDouble());
            std::memcpy(buf, &f, 4);
          } else if (out.datatype == "FP64") {
            double f = v.GetDouble();
            std::memcpy(buf, &f, 8);
          } else if (out.datatype == "INT64") {
            int64_t f = v.GetInt64();
            std::memcpy(buf, &f, 8);
          } else if (out.datatype == "INT32") {
            int32_t f = v.GetInt();
            std::memcpy(buf, &f, 4);
          } else if (out.datatype == "BOOL") {
            buf[0] = v.IsBool() ? v.GetBool() : v.GetInt() != 0;
          } else
            return Unsupported("infer response: JSON data of datatype ", out.datatype);
          out.bytes.append(buf, esize);
        }
      }
      outputs->push_back(std::move(out));
    }
    return Status::Ok();
  }

  Status PostJson(const std::string& target, const std::string& body, const std::string& what) {
    http::response<http::string_body> res;
    SP_RETURN_IF_ERROR(Roundtrip(http::verb::post, target, body, 0, &res));
    if (res.result_int() != 200) return StatusFromHttp(res.result_int(), res.body(), what);
    return Status::Ok();
  }

  Status RegisterSystemSharedMemory(const std::string& name, const std::string& key, uint64_t byte_size,
                                    uint64_t offset) override {
    rapidjson::StringBuffer sb;
    rapidjson::Writer<rapidjson::StringBuffer> w(sb);
    w.StartObject();
    w.Key("key");
    w.String(key.c_str());
    w.Key("offset");
    w.Uint64(offset);
    w.Key("byte_size");
    w.Uint64(byte_size);
    w.EndObject();
    return PostJson("/v2/systemsharedmemory/region/" + name + "/register", sb.GetString(), "shared-memory register");
  }

  Status UnregisterSystemSharedMemory(const std::string& name) override {
    return PostJson("/v2/systemsharedmemory/region/" + name + "/unregister", "", "shared-memory unregister");
  }

 private:
  Status Post(const std::string& target, const std::string& body, size_t header_length,
              std::vector<OutputData>* outputs) {
    http::response<http::string_body> res;
    SP_RETURN_IF_ERROR(Roundtrip(http::verb::post, target, body, header_length, &res));
    if (res.result_int() != 200) return StatusFromHttp(res.result_int(), res.body(), "infer");
    if (!outputs) return Status::Ok();
    return ParseInferResponse(res, outputs);
  }

  std::string host_;
  int port_;
  asio::io_context ioc_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
  bool connected_ = false;
};

}  // namespace

Result<std::unique_ptr<Client>> MakeHttpClient(const std::string& host, int port) {
  auto c = std::make_unique<HttpClient>(host, port);
  SP_RETURN_IF_ERROR(c->Connect());
  return std::unique_ptr<Client>(std::move(c));
}

}  // namespace sampan::client
