// StoreLog: cohortd --data-dir. An append-only log of the store's changes, replayed at start-up
// and compacted into a snapshot when it has grown well past the live data.
//
// File <dir>/store.log: "COHORTLG" + u32 version, then records, each u32 length + u32 CRC-32 +
// payload. A payload is a batch of entries (all or nothing): SET key value, DELETE key, REPLY
// client request bytes (the cached reply of a tagged write, so that a retry after a restart is not
// run twice), and from version 2 APPEND key suffix (a delta: 2,000 appends of 1 KiB write 2 MB,
// not the growing value each time). Version 1 logs load; appends to one are written as SETs until
// a compaction rewrites it as version 2, so an older cohortd can still read it meanwhile. A damaged
// last record (cut short by a crash, or failing its CRC) is dropped, with a warning. Damage with
// valid records after it is no torn write: the log refuses to open and leaves the file untouched,
// unless the operator accepts the loss (the file is copied aside first, then cut at the damage).
// Queues (QUEUE_PUSH) are not persisted.
//
// Durability: every batch is written with write(2) before its reply goes out, so a cohortd killed
// by any signal loses nothing it acknowledged. fsync(2) follows the policy: kAlways (each batch),
// kInterval (at most `fsync_interval` later: a machine crash may lose that much), kNever.
//
// Compaction (start_compaction) runs off the loop, as Redis's BGREWRITEAOF does: fork(2) a child
// that writes the snapshot from its copy-on-write view of the state into store.log.compact, while
// the parent goes on appending to store.log as before. The child also copies what the parent
// appended meanwhile (the log's bytes from the fork on), fdatasyncs, reports through a pipe how
// far it copied and _exits. The parent then copies the little that came after (finish_compaction,
// on the loop: bytes, not records, so a record half copied by the child is completed by it),
// fdatasyncs, and renames the file over store.log. Until that rename store.log holds every
// acknowledged write, and after it the new file does: a crash at any point loses nothing, and a
// store.log.compact left by one is removed at the next start. The loop pauses only for fork()
// (page tables: a few ms per GB) and for the final tail. When fork() fails the child's work is
// done in the loop, as before.
//
// Thread safety: none; the server's loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <sys/types.h>

#include "cohort/rdzv/server_options.h"
#include "server/background_sync.h"
#include "server/store_state.h"

namespace cohort::rdzv {

class StoreLog final : public StoreState::Journal {
 public:
  // Opens (creating) the log in `dir`, replays it into `state` and attaches itself as the
  // state's journal. Throws cohort::Error naming the file on I/O errors, a bad header, or damage
  // before the last record unless `accept_damage`.
  StoreLog(const std::string& dir, StoreState* state, FsyncPolicy policy,
           bool accept_damage = false);
  ~StoreLog() override;

  // Replay figures, for the start-up log line.
  size_t replayed_records() const { return replayed_; }
  bool dropped_torn_tail() const { return torn_tail_; }
  uint64_t dropped_bytes() const { return dropped_bytes_; }
  // Where the damaged log was copied before it was cut ("" when it was not).
  const std::string& damaged_copy() const { return damaged_copy_; }
  // The file existed and was empty (a crash at its creation, or truncated by hand).
  bool was_empty() const { return empty_file_; }

  // Writes a snapshot and replaces the log with it when the log has grown to more than
  // `factor` times the snapshot's size (plus 1 MiB). Returns true when it compacted.
  // Costs nothing while nothing was written since the last check (an idle store never pauses
  // here), and sizes the snapshot without building it.
  // Does it all before returning (a child, waited for): for tests and tools.
  bool maybe_compact(double factor = 2.0);
  // Starts a compaction in the background when one is due (as above) and none runs; true when
  // started. compaction_fd() is then readable once the child is done, and the caller must call
  // finish_compaction(). Throws cohort::Error when the temporary file cannot be created.
  bool start_compaction(double factor = 2.0);
  bool compacting() const { return result_fd_ >= 0; }
  int compaction_fd() const { return result_fd_; }
  pid_t compaction_child() const { return child_; }  // 0 when none (or done in the loop)
  // Completes the compaction whose child is done: true when store.log was replaced. Throws
  // cohort::Error (the compaction abandoned, store.log as it was) when the child failed.
  bool finish_compaction();
  // Stops a running compaction (SIGKILL to the child, the temporary file removed).
  void abandon_compaction();
  // Of the last compaction: done in the loop because fork() failed (its errno, else 0), and the
  // bytes finish_compaction() copied in the loop.
  int last_fork_errno() const { return fork_errno_; }
  uint64_t last_tail_bytes() const { return tail_bytes_; }
  // Bytes written to the log since it was opened, compactions included; compactions done.
  uint64_t bytes_written() const { return bytes_written_; }
  uint64_t size() const { return size_; }  // of store.log
  uint64_t compactions() const { return compactions_; }
  // How long the oldest write not yet handed to fdatasync has waited (zero when none has): the
  // most a machine crash would lose now, in time (--fsync never: since the first write).
  std::chrono::steady_clock::duration unsynced_for() const {
    return dirty_ ? std::chrono::steady_clock::now() - dirty_since_
                  : std::chrono::steady_clock::duration::zero();
  }
  // fsync now if anything was written since the last one (at stop, and for kAlways).
  void sync();
  // The kInterval timer's sync: the same, on a thread of its own (background_sync.h), so that a
  // slow disk never stalls the loop.
  void sync_in_background();
  unsigned long background_syncs() const { return syncer_ ? syncer_->completed() : 0; }

  // StoreState::Journal
  void on_change(std::string_view key, const std::string* value) override;
  void on_append(std::string_view key, std::string_view suffix, const std::string& value) override;
  void on_reply(uint64_t client, uint64_t request, const std::string& reply) override;
  void begin_batch() override;
  void end_batch() override;

 private:
  void replay();
  // Applies one batch's entries; false when it is malformed.
  bool apply_batch(std::string_view payload);
  void append_record(const std::string& payload);
  bool compaction_due(double factor);
  // What the compaction child reports through its pipe.
  struct ChildResult {
    int32_t err = 0;         // errno of the failure, 0 when done
    int32_t stage = 0;       // 1 writing the snapshot, 2 copying the log, 3 fdatasync
    uint64_t copied_to = 0;  // log offset up to which the new file holds the log's tail
  };
  // The child's work: snapshot of the state, then the log's bytes from `from` on, into `out`.
  // Safe in a child forked from a threaded process: no allocation, no lock, no logging.
  ChildResult write_compacted(int out, int log, uint64_t from) const noexcept;
  [[noreturn]] void child_main(int out, int log, int pipe_w, uint64_t from, pid_t parent) const;
  void close_compaction_fds();
  uint64_t snapshot_size() const;  // of the snapshot write_compacted() writes, without writing it
  void add_entry(const std::string& entry);

  std::string dir_, path_;
  StoreState* state_;
  FsyncPolicy policy_;
  int fd_ = -1;
  uint64_t size_ = 0;
  uint32_t version_ = 0;          // of the open file: APPEND entries only from version 2
  uint64_t checked_at_size_ = 0;  // size_ at the last maybe_compact() that looked
  uint64_t bytes_written_ = 0;
  uint64_t compactions_ = 0;
  bool dirty_ = false;                                   // written since the last fsync
  std::chrono::steady_clock::time_point dirty_since_{};  // the first such write
  std::unique_ptr<BackgroundSync> syncer_;               // kInterval only
  int batch_depth_ = 0;
  std::string batch_;
  size_t replayed_ = 0;
  bool accept_damage_ = false;
  bool torn_tail_ = false;
  bool empty_file_ = false;
  uint64_t dropped_bytes_ = 0;
  std::string damaged_copy_;
  // The compaction in progress (result_fd_ >= 0): its child (0 when done in the loop), the new
  // file, a reader of the old log for the tail, and the log's size at the fork.
  std::string tmp_path_;
  pid_t child_ = 0;
  int result_fd_ = -1, tmp_fd_ = -1, read_fd_ = -1;
  uint64_t fork_size_ = 0;
  int fork_errno_ = 0;
  uint64_t tail_bytes_ = 0;
};

}  // namespace cohort::rdzv
