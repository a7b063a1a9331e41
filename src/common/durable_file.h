// Writing a file so that a crash, a full disk or any other failure never leaves half of it
// where the whole was: the bytes go to `path + ".tmp"`, are flushed to disk (fsync), the
// descriptor's close() is checked, and only then is the temporary renamed over `path`
// (and the rename made durable with an fsync of the directory). On any failure the
// temporary is removed and `path` is untouched (the previous file, if any, stays).
//
// Used by the checkpoints of kolo_torch (kolo::save_archive) and of the parameter-server
// strategy (save_checkpoint). Not for: what the bytes mean, or who writes them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kolo {

// The temporary file write_file_durably writes first.
inline std::string durable_temp_path(const std::string& path) { return path + ".tmp"; }

// Writes `parts`, one after the other, as the file `path`. kInvalidArgument when `path`
// is a directory or the temporary cannot be created (its message says which file and
// why); kInternal naming the step (writing, flushing, closing, renaming) and the system's
// error otherwise: "writing ckpt.tmp failed: No space left on device".
Status write_file_durably(const std::string& path, const std::vector<std::string_view>& parts);

}  // namespace kolo
