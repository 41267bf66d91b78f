// The REST shared-memory extensions (Triton's): /v2/systemsharedmemory and /v2/cudasharedmemory,
// each [/region/{name}]/status (GET), /region/{name}/register (POST) and
// [/region/{name}]/unregister (POST), over the Core's one SharedMemoryRegistry.
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <boost/asio/post.hpp>

#include "base/base64.h"
#include "server/http/http_session.h"

namespace sampan::server::http {
namespace {

const char* ExtensionName(SharedMemoryKind kind) {
  return kind == SharedMemoryKind::kCuda ? "CUDA shared memory" : "system shared memory";
}

std::string StatusJson(const std::vector<SharedMemoryRegionInfo>& regions) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  w.StartArray();
  for (const auto& r : regions) {
    w.StartObject();
    w.Key("name");
    w.String(r.name.c_str(), static_cast<rapidjson::SizeType>(r.name.size()));
    if (r.kind == SharedMemoryKind::kCuda) {
      w.Key("device_id");
      w.Uint64(static_cast<uint64_t>(r.device_id));
    } else {
      w.Key("key");
      w.String(r.key.c_str(), static_cast<rapidjson::SizeType>(r.key.size()));
      w.Key("offset");
      w.Uint64(r.offset);
    }
    w.Key("byte_size");
    w.Uint64(r.byte_size);
    w.EndObject();
  }
  w.EndArray();
  return std::string(sb.GetString(), sb.GetSize());
}

}  // namespace

// "" | /region/{name}, then /status (GET) | /register | /unregister (POST).
void SessionBase::RouteSharedMemory(std::string_view rest, bhttp::verb method, SharedMemoryKind kind) {
  if (!server_->options.enable_shared_memory)
    return RespondError(bhttp::status::bad_request,
                        StrCat("the ", ExtensionName(kind),
                               " extension is not enabled on this server (start sampan serve with "
                               "--enable-shared-memory)"));
  if (!rest.empty() && rest[0] == '/') rest.remove_prefix(1);
  std::string_view segs[3];
  size_t n = 0;
  if (!Split(rest, segs, 3, &n)) return RespondError(bhttp::status::not_found, "Not Found");
  std::string region;
  std::string_view action;
  if (n == 1) {
    action = segs[0];
  } else if (n == 3 && segs[0] == "region") {
    if (!DecodeSegment(segs[1], &region)) return RespondError(bhttp::status::bad_request, "malformed region name");
    action = segs[2];
  } else {
    return RespondError(bhttp::status::not_found, "Not Found");
  }
  SharedMemoryRegistry& shm = server_->core->system_shared_memory();
  if (action == "status") {
    if (method != bhttp::verb::get) return MethodNotAllowed();
    auto regions = shm.Regions(region, kind);
    if (!regions.ok()) return RespondStatus(regions.status());
    return RespondJson(StatusJson(*regions));
  }
  if (action != "register" && action != "unregister") return RespondError(bhttp::status::not_found, "Not Found");
  if (method != bhttp::verb::post) return MethodNotAllowed();
  // Mapping the server's shared memory (or opening a CUDA IPC handle, which only works between
  // processes of one machine) is a local affair: loopback (and the token) only.
  if (!loopback_peer_)
    return RespondError(bhttp::status::forbidden,
                        StrCat(ExtensionName(kind), " can be registered only by loopback clients"));
  if (!AuthorizeModelControl()) return;
  if (action == "unregister") {
    Status st = shm.Unregister(region, kind);
    if (!st.ok()) return RespondStatus(st);
    return Respond(bhttp::status::ok, std::string());
  }
  if (region.empty()) return RespondError(bhttp::status::not_found, "Not Found");
  RegisterSharedMemory(region, kind);
}

// System: {"key": $string, "offset": $number (optional), "byte_size": $number}.
// CUDA: {"raw_handle": {"b64": $string}, "device_id": $number, "byte_size": $number}, the handle
// being a cudaIpcMemHandle_t's bytes in base64.
void SessionBase::RegisterSharedMemory(const std::string& region, SharedMemoryKind kind) {
  auto doc = BodyJson();
  if (!doc.ok()) return RespondStatus(doc.status());
  auto size = doc->FindMember("byte_size");
  if (kind == SharedMemoryKind::kSystem) {
    auto key = doc->FindMember("key");
    auto offset = doc->FindMember("offset");
    if (key == doc->MemberEnd() || !key->value.IsString())
      return RespondError(bhttp::status::bad_request, "register: 'key' (a string) is required");
    if (size == doc->MemberEnd() || !size->value.IsUint64())
      return RespondError(bhttp::status::bad_request, "register: 'byte_size' (a non-negative integer) is required");
    if (offset != doc->MemberEnd() && !offset->value.IsUint64())
      return RespondError(bhttp::status::bad_request, "register: 'offset' must be a non-negative integer");
    Status st = server_->core->system_shared_memory().Register(
        region, key->value.GetString(), offset == doc->MemberEnd() ? 0 : offset->value.GetUint64(),
        size->value.GetUint64());
    if (!st.ok()) return RespondStatus(st);
    return Respond(bhttp::status::ok, std::string());
  }
  auto handle = doc->FindMember("raw_handle");
  auto device = doc->FindMember("device_id");
  if (handle == doc->MemberEnd())
    return RespondError(bhttp::status::bad_request, "Shared memory register request has no 'raw_handle' field");
  if (!handle->value.IsObject() || !handle->value.HasMember("b64") || !handle->value["b64"].IsString())
    return RespondError(bhttp::status::bad_request,
                        "register: 'raw_handle' must be an object {\"b64\": the cudaIpcMemHandle_t in base64}");
  if (device == doc->MemberEnd() || !device->value.IsInt64())
    return RespondError(bhttp::status::bad_request, "register: 'device_id' (an integer) is required");
  if (size == doc->MemberEnd() || !size->value.IsUint64())
    return RespondError(bhttp::status::bad_request, "register: 'byte_size' (a non-negative integer) is required");
  const auto& b64 = handle->value["b64"];
  Result<std::string> raw = DecodeBase64(std::string_view(b64.GetString(), b64.GetStringLength()));
  if (!raw.ok())
    return RespondError(
        bhttp::status::bad_request,
        StrCat("failed to register CUDA shared memory region '", region,
               "': 'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t: ", raw.status().message()));
  // Opening the handle makes the device's CUDA context on first use (can take a second): off the
  // I/O threads, as model loads.
  net::post(server_->blocking,
            [self = shared_from_this(), work = TrackedExecutor(), region, raw = std::move(raw).value(),
             device_id = device->value.GetInt64(), byte_size = size->value.GetUint64()]() mutable {
              Status s = self->server_->core->system_shared_memory().RegisterCuda(region, raw, device_id, byte_size);
              auto strand = self->Executor();
              net::post(strand, [self = std::move(self), s = std::move(s), work = std::move(work)]() {
                if (!s.ok()) return self->RespondStatus(s);
                self->Respond(bhttp::status::ok, std::string());
              });
            });
}

}  // namespace sampan::server::http
