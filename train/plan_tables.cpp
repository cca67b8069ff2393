// spmd-plan's tables: the fits of a search with their memory and step time,
// one memory plan (or two) term by term, step times term by term
// (step_time.h), and the refusal of a cluster that no layout fits, naming
// the smallest need (planner.h).
#include <algorithm>
#include <cstdio>

#include "runtime/error.h"
#include "train/planner.h"

namespace spmd::train {
namespace {

// The memory plan's terms, named as the planner prints them.
std::vector<std::pair<std::string, uint64_t>> terms(const MemoryPlan& p) {
  return {{"parameters (f32)", p.parameters},
          {"gradients (f32)", p.gradients},
          {"optimizer (AdamW, f32)", p.optimizer},
          {"DDP buckets", p.ddp_buckets},
          {"gathered FSDP units", p.gathered},
          {"activations", p.activations},
          {"logits", p.logits},
          {"buffers (RoPE)", p.buffers},
          {"checkpoint staging", p.staging}};
}

// "activations 61%": the largest term and its share of the peak.
std::string dominant(const MemoryPlan& plan) {
  std::pair<std::string, uint64_t> top{"", 0};
  for (const auto& t : terms(plan))
    if (t.second > top.second) top = t;
  const std::string name = top.first.substr(0, top.first.find(" ("));
  const double share = plan.peak() > 0 ? 100.0 * double(top.second) / double(plan.peak()) : 0;
  char buf[64];
  std::snprintf(buf, sizeof(buf), " %.0f%%", share);
  return name + buf;
}

std::string pad(std::string s, size_t width) {
  // The layout names hold "·" (two bytes, one column).
  size_t columns = 0;
  for (unsigned char ch : s) columns += (ch & 0xC0) != 0x80;
  s.append(columns < width ? width - columns : 1, ' ');  // at least one space between columns
  return s;
}

}  // namespace

std::string fits_table(const std::vector<Fit>& fits, size_t top) {
  const bool timed = !fits.empty() && fits[0].time;
  std::string out = pad("layout", 64) + pad("memory per device", 20) +
                    (timed ? pad("dominated by", 28) + pad("step", 11) + pad("tokens/s", 12) +
                                 pad("MFU", 8) + "bound by\n"
                           : "dominated by\n");
  for (size_t i = 0; i < std::min(top, fits.size()); ++i) {
    const Fit& f = fits[i];
    out += pad(describe(f.layout), 64) + pad(format_gb(f.plan.peak()), 20);
    if (!f.time) {
      out += dominant(f.plan) + "\n";
      continue;
    }
    char rate[32], mfu[16];
    std::snprintf(rate, sizeof rate, "%.0f", f.time->tokens_per_s);
    std::snprintf(mfu, sizeof mfu, "%.1f%%", 100 * f.time->mfu);
    out += pad(dominant(f.plan), 28) + pad(format_seconds(f.time->total), 11) + pad(rate, 12) +
           pad(f.time->mfu > 0 ? mfu : "-", 8) + f.time->bound + "\n";
  }
  return out;
}

std::string terms_table(const std::vector<std::string>& heads,
                        const std::vector<MemoryPlan>& plans) {
  std::string out = pad("", 28);
  for (const std::string& h : heads) out += pad(h, 24);
  out += "\n";
  for (size_t i = 0; i < terms(plans[0]).size(); ++i) {
    uint64_t any = 0;
    std::string row = pad("  " + terms(plans[0])[i].first, 28);
    for (const MemoryPlan& p : plans) {
      row += pad(format_gb(terms(p)[i].second), 24);
      any += terms(p)[i].second;
    }
    if (any > 0) out += row + "\n";
  }
  std::string peak = pad("  peak per device", 28), shape = pad("  microbatches x rows x T", 28);
  for (const MemoryPlan& p : plans) {
    peak += pad(format_gb(p.peak()), 24);
    shape += pad(str_cat(p.in_flight, " x ", p.microbatch_rows, " x ", p.tokens_per_row), 24);
  }
  return out + peak + "\n" + shape + "\n";
}

void check_some_layout_fits(const Search& search, const Cluster& cluster) {
  SPMD_CHECK(search.layouts > 0, "no valid layout of ", cluster.devices,
             " devices: the batch, heads, vocabulary, layers or sequence divide over none (tp "
             "within a node of ",
             cluster.devices_per_node, ")");
  SPMD_CHECK(!search.fits.empty(), "no layout of ", cluster.devices, " devices fits ",
             format_gb(cluster.device_memory), " per device: the smallest need is ",
             format_gb(search.smallest->plan.peak()), " per device (",
             describe(search.smallest->layout), ", ", dominant(search.smallest->plan), ")");
}

std::string time_table(const std::vector<std::string>& heads, const std::vector<StepTime>& times) {
  const auto pad = [](std::string s, size_t width) {
    s.append(s.size() < width ? width - s.size() : 1, ' ');
    return s;
  };
  // Rows: compute, every collective any column has (in order of first
  // appearance), the bubble, then the totals.
  std::vector<std::pair<std::string, std::vector<std::string>>> rows;
  const auto row = [&](const std::string& name, size_t column, const std::string& value) {
    auto it =
        std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return r.first == name; });
    if (it == rows.end())
      it = rows.insert(rows.end(), {name, std::vector<std::string>(times.size())});
    it->second[column] = value;
  };
  const auto name_of = [](const CommTerm& c) {
    return str_cat(c.axis, " ", c.op,
                   c.after_step   ? " (after the step)"
                   : c.overlapped ? " (hidden)"
                                  : "",
                   " ", c.what);
  };
  for (size_t i = 0; i < times.size(); ++i) row("compute", i, format_seconds(times[i].compute));
  // Given a memory bandwidth, the part of compute that is the other ops'
  // traffic (step_traffic.h).
  if (std::any_of(times.begin(), times.end(), [](const StepTime& t) { return t.memory > 0; }))
    for (size_t i = 0; i < times.size(); ++i)
      row("  of which memory traffic", i, format_seconds(times[i].memory));
  for (size_t i = 0; i < times.size(); ++i)
    for (const CommTerm& c : times[i].comm)
      row(name_of(c), i, str_cat(format_seconds(c.seconds), " (", c.calls, ")"));
  for (size_t i = 0; i < times.size(); ++i) {
    const StepTime& t = times[i];
    char rate[32], mfu[16];
    std::snprintf(rate, sizeof rate, "%.0f", t.tokens_per_s);
    std::snprintf(mfu, sizeof mfu, "%.1f%%", 100 * t.mfu);
    row("bubble", i, t.bubble > 0 ? format_seconds(t.bubble) : "0");
    row("exposed communication", i, format_seconds(t.exposed));
    row("step", i, format_seconds(t.total));
    row("tokens/s", i, rate);
    row("MFU", i, t.mfu > 0 ? mfu : "-");
    row("bound by", i, t.bound);
  }
  std::string out = pad("per step, seconds (calls)", 64);
  for (const std::string& h : heads) out += pad(h, 24);
  out += "\n";
  for (const auto& [name, values] : rows) {
    std::string line = pad("  " + name, 64);
    for (const std::string& v : values) line += pad(v.empty() ? "0" : v, 24);
    out += line + "\n";
  }
  return out;
}

std::string format_seconds(double s) {
  char buf[32];
  if (s >= 1) {
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  } else if (s >= 1e-3) {
    std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  }
  return buf;
}

}  // namespace spmd::train
