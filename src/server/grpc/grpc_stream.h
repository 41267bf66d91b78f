// ModelStreamInfer: one bidirectional stream carrying many inference requests.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>

#include "grpc_service.pb.h"
#include "server/core/core.h"

namespace sampan::server {

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
  explicit StreamInferReactor(Core* core);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  void StartNextRead();
  //! Queues a response for writing (from a gRPC or a Core thread); the last
  //! thing a caller does with `this`.
  void Send(std::unique_ptr<inference::ModelStreamInferResponse> response);
  //! Under mu_: whether the stream may finish now (marks it finishing).
  bool TakeFinishLocked();

  Core* core_;
  //! Shared with every request of the stream: set on cancel or a broken stream.
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<inference::ModelInferRequest> next_;  //!< the message the pending read fills

  std::mutex mu_;
  int in_flight_ = 0;         //!< requests read whose response is not yet queued
  bool reads_done_ = false;   //!< the client half-closed (or the stream broke)
  bool writing_ = false;      //!< a StartWrite is outstanding (for writes_.front())
  bool broken_ = false;       //!< a write failed: responses are dropped from now on
  bool finishing_ = false;    //!< Finish has been (or is about to be) called
  std::deque<std::unique_ptr<inference::ModelStreamInferResponse>> writes_;
};

}  // namespace sampan::server
