// Boost.Beast body types of the REST front end.
//
// RequestBody receives the request into one 64-byte-aligned heap block that
// inference requests can share (binary inputs wrap it), placed so that the
// binary part after the JSON inference header starts 64-byte aligned.
// ReplyBody sends a JSON part and then tensors straight from their storage.
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional.hpp>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "base/tensor.h"

namespace sampan::server::http {

inline constexpr char kInferHeaderLength[] = "Inference-Header-Content-Length";

//! Parses a non-negative decimal header value; false if it is not one.
inline bool ParseSize(std::string_view text, uint64_t* out) {
  if (text.empty()) return false;
  auto r = std::from_chars(text.data(), text.data() + text.size(), *out);
  return r.ec == std::errc() && r.ptr == text.data() + text.size();
}

struct RequestBody {
  struct value_type {
    std::shared_ptr<void> storage;  //!< owns the block; InferRequest::keepalive shares it
    char* data = nullptr;           //!< first body byte, inside the block
    size_t size = 0;
    size_t capacity = 0;  //!< bytes available from `data`
  };

  class reader {
   public:
    // Beast builds the reader with the parser, before any header arrives:
    // keep the header and look at it in init().
    template <bool isRequest, class Fields>
    reader(boost::beast::http::header<isRequest, Fields>& h, value_type& body) : fields_(h), body_(body) {}

    void init(const boost::optional<std::uint64_t>& length, boost::beast::error_code& ec) {
      ec = {};
      body_.size = 0;
      uint64_t json_size = 0;
      auto it = fields_.find(kInferHeaderLength);
      if (it != fields_.end() && ParseSize(std::string_view(it->value().data(), it->value().size()), &json_size))
        lead_ = static_cast<size_t>((kAlign - json_size % kAlign) % kAlign);
      // The parser has already checked `length` against its body limit.
      if (length && *length > 0) Grow(static_cast<size_t>(*length));
    }

    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& ec) {
      ec = {};
      const size_t n = boost::asio::buffer_size(buffers);
      if (body_.size + n > body_.capacity) Grow(std::max(body_.size + n, 2 * body_.capacity));
      boost::asio::buffer_copy(boost::asio::buffer(body_.data + body_.size, n), buffers);
      body_.size += n;
      return n;
    }

    void finish(boost::beast::error_code& ec) { ec = {}; }

   private:
    static constexpr size_t kAlign = 64;

    // Only chunked bodies (no Content-Length) grow more than once.
    void Grow(size_t capacity) {
      void* block = ::operator new (lead_ + capacity, std::align_val_t{kAlign});
      std::shared_ptr<void> storage(block, [](void* p) { ::operator delete (p, std::align_val_t{kAlign}); });
      char* data = static_cast<char*>(block) + lead_;
      if (body_.size > 0) std::memcpy(data, body_.data, body_.size);
      body_.storage = std::move(storage);
      body_.data = data;
      body_.capacity = capacity;
    }

    const boost::beast::http::fields& fields_;
    value_type& body_;
    size_t lead_ = 0;
  };
};

struct ReplyBody {
  struct value_type {
    std::string head;             //!< the JSON (or text) part
    std::vector<Tensor> tensors;  //!< sent after `head`, each whole
  };

  static std::uint64_t size(const value_type& body) {
    uint64_t n = body.head.size();
    for (const Tensor& t : body.tensors) n += t.nbytes();
    return n;
  }

  class writer {
   public:
    using const_buffers_type = std::vector<boost::asio::const_buffer>;

    template <bool isRequest, class Fields>
    writer(const boost::beast::http::header<isRequest, Fields>&, const value_type& body) : body_(body) {}

    void init(boost::beast::error_code& ec) { ec = {}; }

    boost::optional<std::pair<const_buffers_type, bool>> get(boost::beast::error_code& ec) {
      ec = {};
      if (done_) return boost::none;
      done_ = true;
      const_buffers_type buffers;
      buffers.reserve(1 + body_.tensors.size());
      if (!body_.head.empty()) buffers.emplace_back(body_.head.data(), body_.head.size());
      for (const Tensor& t : body_.tensors)
        if (t.nbytes() > 0) buffers.emplace_back(t.raw(), t.nbytes());
      if (buffers.empty()) return boost::none;
      return std::make_pair(std::move(buffers), false);
    }

   private:
    const value_type& body_;
    bool done_ = false;
  };
};

}  // namespace sampan::server::http
