#include "isolated_decode/message_channel.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace zarr_device::isolated_decode {

namespace {

constexpr std::size_t kMostFds = 4;

void keep_or_close(const msghdr& msg, std::vector<int>* fds) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
       c = CMSG_NXTHDR(const_cast<msghdr*>(&msg), c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < n; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (fds != nullptr) {
        fds->push_back(fd);
      } else {
        ::close(fd);
      }
    }
  }
}

}  // namespace

MessageChannel::~MessageChannel() {
  if (fd_ >= 0) ::close(fd_);
}

bool MessageChannel::send(MessageType type, std::span<const std::uint8_t> payload,
                          std::span<const int> fds, std::string& why) {
  const std::vector<std::uint8_t> header = encode_header(type, payload.size());
  iovec parts[2] = {{const_cast<std::uint8_t*>(header.data()), header.size()},
                    {const_cast<std::uint8_t*>(payload.data()), payload.size()}};
  std::size_t part = 0;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMostFds)] = {};
  bool with_fds = !fds.empty();
  if (fds.size() > kMostFds) {
    why = "too many descriptors for one message";
    return false;
  }
  while (part < 2) {
    msghdr msg{};
    msg.msg_iov = &parts[part];
    msg.msg_iovlen = 2 - part;
    if (with_fds) {  // beside the first byte sent
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    const ssize_t sent = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      why = std::string("the decoder process is gone (") + std::strerror(errno) + ")";
      return false;
    }
    with_fds = false;
    auto left = static_cast<std::size_t>(sent);
    while (part < 2 && left >= parts[part].iov_len) {
      left -= parts[part].iov_len;
      ++part;
    }
    if (part < 2) {
      parts[part].iov_base = static_cast<std::uint8_t*>(parts[part].iov_base) + left;
      parts[part].iov_len -= left;
    }
  }
  return true;
}

MessageChannel::Received MessageChannel::read_exactly(std::uint8_t* into, std::size_t n,
                                                      std::vector<int>* fds, Deadline deadline,
                                                      std::string& why) {
  std::size_t got = 0;
  while (got < n) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      why = "the decoder process did not answer in time";
      return Received::kTimedOut;
    }
    pollfd p{fd_, POLLIN, 0};
    const int ready =
        ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count() + 1, 1 << 30)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) continue;  // the loop's deadline check decides
    if (ready < 0) {
      why = std::string("poll failed: ") + std::strerror(errno);
      return Received::kClosed;
    }
    iovec part{into + got, n - got};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMostFds)] = {};
    msghdr msg{};
    msg.msg_iov = &part;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t r = ::recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) {
      why = std::string("the decoder process is gone (") + std::strerror(errno) + ")";
      return Received::kClosed;
    }
    keep_or_close(msg, fds);
    if (r == 0) {
      why =
          got == 0 ? "the decoder process closed its end" : "the decoder process ended mid-message";
      return Received::kClosed;
    }
    got += static_cast<std::size_t>(r);
  }
  return Received::kMessage;
}

MessageChannel::Received MessageChannel::receive(Message& message, std::vector<int>* fds,
                                                 Deadline deadline, std::string& why) {
  std::uint8_t header[kHeaderBytes];
  if (Received r = read_exactly(header, kHeaderBytes, fds, deadline, why);
      r != Received::kMessage) {
    return r;
  }
  const std::optional<Header> h = decode_header(header, why);
  if (!h) return Received::kMalformed;
  message.type = h->type;
  message.payload.resize(h->payload_bytes);
  return read_exactly(message.payload.data(), h->payload_bytes, fds, deadline, why);
}

bool MessageChannel::readable() const {
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

}  // namespace zarr_device::isolated_decode
