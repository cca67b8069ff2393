// The progress record's text form.
#include "runtime/progress.h"

#include <sstream>

#include "runtime/error.h"

namespace spmd {

std::string progress_key(std::string_view group, int rank) {
  return str_cat(group, "/progress/", rank);
}

std::string encode_progress(const RankProgress& p) {
  std::string op = p.op.empty() ? "-" : p.op;
  for (char& c : op) {
    if (c == '\n') c = ' ';
  }
  return str_cat("spmd-progress 1 ", p.rank, " ", p.issued, " ", p.completed, " ", p.seq, " ",
                 p.since_us, " ", op);
}

std::optional<RankProgress> decode_progress(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string magic;
  int version = 0;
  RankProgress p;
  if (!(in >> magic >> version >> p.rank >> p.issued >> p.completed >> p.seq >> p.since_us))
    return std::nullopt;
  if (magic != "spmd-progress" || version != 1 || p.rank < 0 || p.completed > p.issued)
    return std::nullopt;
  std::getline(in >> std::ws, p.op);
  if (p.op.empty()) return std::nullopt;
  return p;
}

}  // namespace spmd
