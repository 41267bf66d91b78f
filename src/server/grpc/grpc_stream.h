// ModelStreamInfer: one bidirectional stream carrying many inference requests.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "grpc_service.pb.h"
#include "server/core/core.h"
#include "server/core/rate_limit.h"

namespace sampan::server {

class StreamInferReactor;

//! The open streams of a server, so that stopping the server can end the
//! idle ones at once instead of waiting for gRPC's shutdown deadline.
class StreamRegistry {
 public:
  //! Ends every open stream once its in-flight responses are written, and
  //! every stream opened from now on at once (UNAVAILABLE).
  void StopAll();

 private:
  friend class StreamInferReactor;
  bool Add(StreamInferReactor* r);  //!< false when stopping
  void Remove(StreamInferReactor* r);

  std::mutex mu_;
  bool stopping_ = false;
  std::set<StreamInferReactor*> open_;
};

//! Reads requests one after another and hands each to Core as soon as it
//! arrives, so many are in flight at once; writes each response when Core
//! completes it (completion order, not request order — clients match them by
//! id). A bad request or a failed inference is a response with error_message
//! set; the stream stays open. The stream finishes (OK) once the client has
//! half-closed and every response is written; if the client cancels or goes
//! away, every request still queued in Core is marked cancelled.
//!
//! Owns itself: gRPC calls OnDone last, which deletes it.
class StreamInferReactor final
    : public ::grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse> {
 public:
  //! `shm`: the system shared-memory registry, or nullptr when the extension is off.
  //! `limiter` (or nullptr): --rate-limit-per-connection, applied to each request by `peer`.
  StreamInferReactor(Core* core, StreamRegistry* registry, const SharedMemoryRegistry* shm,
                     PeerRateLimiter* limiter = nullptr, std::string peer = {});

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  friend class StreamRegistry;
  void StartNextRead();
  //! The server is stopping: no more reads; finish once the responses in
  //! flight are written. True when there are none: the caller must Finish.
  bool Stop();
  //! Queues a response for writing (from a gRPC or a Core thread); the last
  //! thing a caller does with `this`.
  void Send(std::unique_ptr<inference::ModelStreamInferResponse> response);
  //! The answers to one request (a decoupled model's: any number, none included), written in order.
  void SendAll(std::vector<std::unique_ptr<inference::ModelStreamInferResponse>> responses);
  //! Under mu_: whether the stream may finish now (marks it finishing).
  bool TakeFinishLocked();
  //! OK, or UNAVAILABLE when the server ended the stream.
  ::grpc::Status FinalStatus();

  Core* core_;
  StreamRegistry* registry_;
  const SharedMemoryRegistry* shm_;
  PeerRateLimiter* limiter_;
  std::string peer_;
  //! Shared with every request of the stream: set on cancel or a broken stream.
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<inference::ModelInferRequest> next_;  //!< the message the pending read fills

  std::mutex mu_;
  //! Held from starting the next read until this request is queued: the next message's
  //! OnReadDone waits for it, so a stream's requests reach their models in the order sent
  //! (a sequence's steps must).
  std::mutex order_mu_;
  int in_flight_ = 0;        //!< requests read whose response is not yet queued
  bool reads_done_ = false;  //!< the client half-closed (or the stream broke)
  bool writing_ = false;     //!< a StartWrite is outstanding (for writes_.front())
  bool broken_ = false;      //!< a write failed: responses are dropped from now on
  bool finishing_ = false;   //!< Finish has been (or is about to be) called
  bool stopping_ = false;    //!< the server is stopping: the stream ends UNAVAILABLE
  std::deque<std::unique_ptr<inference::ModelStreamInferResponse>> writes_;
};

}  // namespace sampan::server
