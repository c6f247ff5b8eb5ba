#include "isolated_decode/decoder_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;  // NOLINT: POSIX declares it nowhere else

namespace zarr_device::isolated_decode {

namespace {

constexpr int kChildFd = 3;
constexpr std::size_t kMostDescription = 4096;

}  // namespace

std::unique_ptr<DecoderProcess> DecoderProcess::start(const DecoderProgram& program,
                                                      const DecoderSetup& setup,
                                                      std::span<const int> fds, Deadline deadline,
                                                      std::string& why) {
  int ends[2] = {-1, -1};
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) {
    why = std::string("could not make a socket for the decoder process: ") + std::strerror(errno);
    return nullptr;
  }
  // The child's end becomes its descriptor 3 (without close-on-exec: dup2 clears it, unless it is
  // already 3, so it is moved off 3 first).
  int child_end = ends[1];
  if (child_end == kChildFd) {
    child_end = ::fcntl(ends[1], F_DUPFD_CLOEXEC, kChildFd + 1);
    ::close(ends[1]);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, child_end, kChildFd);
  std::vector<std::string> args = {program.path, "--fd", std::to_string(kChildFd)};
  args.insert(args.end(), program.args.begin(), program.args.end());
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int spawned =
      ::posix_spawn(&pid, program.path.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(child_end);
  if (spawned != 0) {
    ::close(ends[0]);
    why = "could not start the decoder program " + program.path + ": " + std::strerror(spawned);
    return nullptr;
  }
  std::unique_ptr<DecoderProcess> process(new DecoderProcess(pid, ends[0]));
  const std::vector<std::uint8_t> payload = encode(setup);
  Message ready;
  if (!process->channel_.send(MessageType::kSetup, payload, fds, why)) {
    process->end(why);
    return nullptr;
  }
  const auto received = process->channel_.receive(ready, nullptr, deadline, why);
  if (received != MessageChannel::Received::kMessage || ready.type != MessageType::kReady ||
      ready.payload.size() > kMostDescription) {
    if (why.empty()) why = "the decoder process answered its setup with something else";
    process->end(why, received == MessageChannel::Received::kClosed);
    return nullptr;
  }
  process->description_.assign(ready.payload.begin(), ready.payload.end());
  return process;
}

DecoderProcess::~DecoderProcess() {
  std::string ignored;
  end(ignored);
}

std::optional<DecodedBatch> DecoderProcess::decode(const DecodeBatch& batch, Deadline deadline,
                                                   std::string& why) {
  if (!send(batch, why)) return std::nullopt;
  return receive(batch, deadline, why);
}

bool DecoderProcess::send(const DecodeBatch& batch, std::string& why) {
  if (!running()) {
    why = "the decoder process has ended";
    return false;
  }
  if (!channel_.send(MessageType::kDecode, encode(batch), {}, why)) {
    end(why);
    return false;
  }
  return true;
}

std::optional<DecodedBatch> DecoderProcess::receive(const DecodeBatch& batch, Deadline deadline,
                                                    std::string& why) {
  if (!running()) {
    why = "the decoder process has ended";
    return std::nullopt;
  }
  Message answer;
  const auto received = channel_.receive(answer, nullptr, deadline, why);
  if (received != MessageChannel::Received::kMessage) {
    // A closed socket is a process ending (a fault, most likely): give it a moment to, so that
    // the message says how; one that stopped answering is killed at once.
    end(why, received == MessageChannel::Received::kClosed);
    return std::nullopt;
  }
  if (answer.type != MessageType::kDecoded) {
    why = "the decoder process answered a batch with a message of another kind";
    end(why);
    return std::nullopt;
  }
  std::optional<DecodedBatch> decoded = decode_decoded(answer.payload, batch, why);
  if (!decoded) end(why);
  return decoded;
}

void DecoderProcess::end(std::string& why, bool ending) {
  if (pid_ <= 0) return;
  int status = 0;
  pid_t done = ::waitpid(pid_, &status, WNOHANG);
  for (int wait = 0; ending && done == 0 && wait < 200; ++wait) {
    ::usleep(5000);  // up to a second
    done = ::waitpid(pid_, &status, WNOHANG);
  }
  if (done == 0) {  // still running: it hangs, or it answered nonsense
    ::kill(pid_, SIGKILL);
    while ((done = ::waitpid(pid_, &status, 0)) < 0 && errno == EINTR) {
    }
    why += " (decoder process " + std::to_string(pid_) + " killed)";
  } else if (done == pid_ && WIFSIGNALED(status)) {
    why += " (decoder process " + std::to_string(pid_) + " ended by signal " +
           std::to_string(WTERMSIG(status)) + ")";
  } else if (done == pid_ && WIFEXITED(status)) {
    why += " (decoder process " + std::to_string(pid_) + " exited with " +
           std::to_string(WEXITSTATUS(status)) + ")";
  }
  pid_ = -1;
}

}  // namespace zarr_device::isolated_decode
