// LinkSession: cohortd's side of a node's relay link (relay_wire.h, docs/RELAY.md §3). One TCP
// connection carries many workers' connections as channels; each channel is a ChannelStream, and
// the server runs an ordinary Session over it, so that a worker behind a relay gets exactly the
// protocol, limits and timers of a direct connection.
//
// Flow control mirrors a socket's: a channel whose session stops reading (backlogged) sends the
// relay PAUSE once its unread bytes reach kChannelWindow, and RESUME once the session has read
// them; bytes written to a channel count as unsent until the relay acknowledges them (ACK, once
// its worker has them), so --max-unsent-bytes holds the session's requests as it would behind a
// slow socket. Writes also stay unfinished while the link's own output is backed up.
//
// Thread safety: the server's loop thread only. Keeps itself alive through shared_from_this.
#pragma once

#include <asio/ip/tcp.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "server/session_stream.h"

namespace spdlog {
class logger;
}

namespace cohort::rdzv {

class ChannelStream;
class LinkSession;

// What a link needs from its server.
class LinkHost {
 public:
  virtual ~LinkHost() = default;
  // A worker connected to the relay: start a session over `stream`. False when the server
  // refuses it (--max-connections, --max-connections-per-address); the link then closes it.
  virtual bool open_channel(LinkSession& link, std::shared_ptr<ChannelStream> stream) = 0;
  // The link is gone (every channel has been told).
  virtual void on_link_closed(LinkSession& link) = 0;
  virtual spdlog::logger& log() = 0;
};

class LinkSession : public std::enable_shared_from_this<LinkSession> {
 public:
  // Unread bytes of one channel before the relay is asked to pause it.
  static constexpr size_t kChannelWindow = 256 * 1024;
  // Output queued on the link before channel writes stop finishing.
  static constexpr size_t kOutputLimit = 4 << 20;

  // `host` must outlive the link. `read_so_far`: what was read before the link was recognised
  // (its hello, maybe more). `id` also scopes the channels' shared waits.
  LinkSession(LinkHost& host, asio::ip::tcp::socket socket, uint64_t id, std::string peer,
              std::string address, std::string read_so_far, uint64_t max_unsent_bytes);

  void start();
  // Closes the link and every channel (server shutdown).
  void stop();

  uint64_t id() const { return id_; }
  const std::string& peer() const { return peer_; }
  const std::string& address() const { return address_; }
  size_t channels() const { return channels_.size(); }

 private:
  friend class ChannelStream;
  void do_read();
  void on_readable(std::error_code ec);
  // Handles whole frames in in_; false when the link must close (why in *error).
  bool handle_input(std::string* error);
  bool handle_frame(uint8_t kind, uint32_t channel, std::string_view payload, std::string* error);
  void send_frame(uint8_t kind, uint32_t channel);
  void send_data(uint32_t channel, std::string_view bytes);
  void flush();
  void flush_soon();
  // Channel writes that wait for the link's output to drain.
  void release_blocked_writes();
  void close_link(const std::string& reason);
  void forget(uint32_t channel) { channels_.erase(channel); }

  LinkHost& host_;
  asio::ip::tcp::socket socket_;
  const uint64_t id_;
  const std::string peer_;
  const std::string address_;
  const uint64_t max_unsent_bytes_;
  std::string in_;  // bytes read, from in_pos_ on not yet handled
  size_t in_pos_ = 0;
  bool welcomed_ = false;
  std::string out_;
  std::string writing_;
  bool write_in_flight_ = false;
  bool flush_posted_ = false;
  bool closed_ = false;
  std::unordered_map<uint32_t, std::shared_ptr<ChannelStream>> channels_;
  std::unordered_set<uint32_t> blocked_writes_;  // channels whose write waits for the output
};

// One worker connection carried by a link, as a stream for a Session.
class ChannelStream final : public SessionStream,
                            public std::enable_shared_from_this<ChannelStream> {
 public:
  ChannelStream(std::weak_ptr<LinkSession> link, uint32_t channel, asio::any_io_executor ex)
      : link_(std::move(link)), channel_(channel), executor_(std::move(ex)) {}

  void async_read_some(std::span<uint8_t> into, Handler done) override;
  void async_write(const std::vector<asio::const_buffer>& buffers, Handler done) override;
  void close(bool graceful) override;
  asio::any_io_executor executor() override { return executor_; }
  size_t unacknowledged() const override { return sent_ - acked_; }
  void on_acknowledged(std::function<void()> fn) override { on_acked_ = std::move(fn); }
  uint32_t channel() const { return channel_; }

 private:
  friend class LinkSession;
  // From the link.
  void on_data(std::string_view bytes);
  void on_end();  // the relay closed the channel, or the link is gone
  // The relay passed `bytes` more on to the worker; false when it claims more than was sent.
  bool on_ack(uint64_t bytes);
  // Finishes the write in flight when nothing holds it back.
  void maybe_finish_write();
  void fulfil_read();

  std::weak_ptr<LinkSession> link_;
  const uint32_t channel_;
  asio::any_io_executor executor_;
  std::string in_;  // unread bytes from the relay, from in_pos_ on
  size_t in_pos_ = 0;
  std::span<uint8_t> read_into_;
  Handler read_done_;
  Handler write_done_;
  size_t write_bytes_ = 0;
  uint64_t sent_ = 0, acked_ = 0;  // bytes written to the relay, and acknowledged by it
  std::function<void()> on_acked_;
  bool ended_ = false;      // no more bytes will come (relay CLOSE, link gone)
  bool closed_ = false;     // the session closed it
  bool we_paused_ = false;  // we asked the relay to pause this channel
};

}  // namespace cohort::rdzv
