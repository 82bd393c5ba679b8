// Token files: a read-only 1-D array of token ids, whatever format holds it.
//
//   HDF5     — dataset /tokens, 1-D uint16 or uint32; its attributes (on the dataset, not the
//              root group) `vocab_size` (integer) and `tokenizer` (string) are optional. An
//              optional dataset /loss_mask, 1-D uint8 of the same length, says which tokens are
//              scored as a target: 1 yes, 0 no (a fine-tuning set's prompts; prepare-data
//              --prompt-field writes it). Without it every target is scored.
//   llm.c    — int32[256] header ([0] magic, [1] version, [2] count), then the tokens:
//              magic 20240520 version 1 = uint16, magic 20240801 version 7 = uint32.
//   nanoGPT  — raw uint16 tokens, no header (train.bin / val.bin).
//   Megatron — Megatron-LM's indexed dataset, PREFIX.bin (the tokens, uint16 or int32) beside
//              PREFIX.idx (token_source_megatron.cpp), named by the .bin or the prefix; read as
//              one token array, documents in stored order.
// Files are opened once; read() is cheap (a copy out of a read-only mapping, or a hyperslab) and
// may be called often. An HDF5 file whose /tokens is contiguous, unfiltered and little-endian (what
// prepare-data writes) is mapped like the others after open: no HDF5 call after that. Any other
// HDF5 layout is read through HDF5, which must then stay on one thread (this HDF5 build is not
// thread-safe): concurrent_reads() says which.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace mpitrain {

enum class TokenFormat { Auto, Hdf5, Llmc, NanoGpt, Megatron };

// "auto" | "hdf5" | "llmc" | "nanogpt" | "megatron"; anything else is a UsageError.
TokenFormat parse_token_format(const std::string& name);

class TokenSource {  // a read-only 1-D array of token ids
 public:
  virtual ~TokenSource() = default;
  virtual uint64_t size() const = 0;  // number of tokens
  // Tokens [offset, offset+count) into out; Error if the range is outside [0, size()).
  virtual void read(uint64_t offset, uint64_t count, int32_t* out) const = 0;
  virtual int64_t vocab_size() const = 0;     // declared by the file; -1 if none (llm.c, nanoGPT)
  virtual std::string tokenizer() const = 0;  // declared tokenizer ("bytes", "gpt2"), "" if none
  virtual const std::string& path() const = 0;
  // read() may run on another thread than other HDF5 calls (a mapped file, no HDF5 library).
  virtual bool concurrent_reads() const { return false; }
  // Whether the file has a loss mask (HDF5 /loss_mask); without one every target is scored.
  virtual bool has_loss_mask() const { return false; }
  // Mask bytes [offset, offset+count) into out (1: the token is scored as a target, 0: not), as
  // read() reads tokens; Error if the file has no mask.
  virtual void read_loss_mask(uint64_t offset, uint64_t count, uint8_t* out) const;
  // Whether the tokenizer's document boundary token fails to mark where the file's documents
  // begin (HDF5 /tokens attribute kDocumentsUnmarked = 1): conversations whose chat template puts
  // it inside them, as Qwen's <|im_end|> ends every turn, or leaves it out.
  virtual bool documents_unmarked() const { return false; }
};

inline constexpr const char* kDocumentsUnmarked = "documents_unmarked";

// The file prepare-data keeps beside a train/val pair while it renames the two into place, one
// name a line: left behind, it says that a kill came between the renames (a new train beside the
// old val), and open_tokens refuses each file it lists.
inline constexpr const char* kPairReplacingMarker = "prepare-data.replacing";

// Opens a token file. Auto: HDF5 by its signature, llm.c by its magic, Megatron for X.bin beside
// a Megatron X.idx (or a prefix X naming both), else nanoGPT if the name ends in .bin and the size
// is even. Missing/unreadable file, unknown or malformed content (wrong
// magic or version, truncated shard, no /tokens or a group there, wrong dtype, a vocab_size out
// of range), a file that kPairReplacingMarker lists: UsageError naming the file. The same for a
// /loss_mask, which must also be uint8 and as long as /tokens.
std::unique_ptr<TokenSource> open_tokens(const std::string& path,
                                         TokenFormat format = TokenFormat::Auto);

// The largest token id in [begin, end) (0 if empty), read in chunks of a few MiB.
uint32_t max_token(const TokenSource& src, uint64_t begin, uint64_t end);

// The largest loss-mask byte in [begin, end) (0 if empty; a mask holds only 0 and 1); Error if
// the file has no mask.
uint8_t max_loss_mask(const TokenSource& src, uint64_t begin, uint64_t end);

}  // namespace mpitrain
