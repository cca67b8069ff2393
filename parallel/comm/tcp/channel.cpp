// SocketChannel: the channel interface as plain socket calls.
#include "parallel/comm/tcp/channel.h"

#include <sys/socket.h>
#include <unistd.h>

namespace spmd::dist::tcp {

void Channel::shutdown() {
  if (fd() >= 0) ::shutdown(fd(), SHUT_RDWR);
}

SocketChannel::~SocketChannel() {
  if (fd_ >= 0) ::close(fd_);
}

ssize_t SocketChannel::write(const iovec* iov, size_t n) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = n;
  return ::sendmsg(fd_, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
}

ssize_t SocketChannel::read(const iovec* iov, size_t n) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = n;
  return ::recvmsg(fd_, &msg, MSG_DONTWAIT);
}

ssize_t SocketChannel::peek(void* dst, size_t n) {
  return ::recv(fd_, dst, n, MSG_PEEK | MSG_DONTWAIT);
}

}  // namespace spmd::dist::tcp
