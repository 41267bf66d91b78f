// JSON renderings of the KServe v2 / Triton REST responses that are not
// inference: server and model metadata, model config, statistics, repository
// index, errors. Field names and shapes follow Triton's HTTP server so that
// tritonclient.http and perf_analyzer parse them unchanged.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "server/core/core.h"

namespace sampan::server::http {

//! {"error":"<message>"}
std::string ErrorJson(std::string_view message);
//! {"name","version","extensions":[...]}
std::string ServerMetadataJson(const ServerMetadata& metadata);
//! {"name","versions":[...],"platform","inputs":[{"name","datatype","shape"}],"outputs":[...]}
std::string ModelMetadataJson(const ModelMetadata& metadata);
//! The ModelConfig message as Triton prints it: proto field names, every
//! scalar and repeated field (defaults included), set messages only, enums as
//! names and 64-bit integers as JSON numbers (not protobuf's strings).
std::string ModelConfigJson(const ModelConfig& config);
//! {"model_stats":[{name, version, last_inference, inference_count, execution_count,
//!  inference_stats:{success,fail,queue,compute_*,cache_hit,cache_miss}, batch_stats, ...}]}
std::string StatisticsJson(const std::vector<ModelStats>& stats);
//! [{"name","version","state","reason"}]; empty version/reason omitted.
std::string RepositoryIndexJson(const std::vector<RepositoryEntry>& entries);

}  // namespace sampan::server::http
