// The safetensors format (tensor/safetensors.h): an 8-byte little-endian
// header length, a JSON header naming each tensor's dtype, shape and byte
// range, then the raw bytes. Writing copies each tensor to the host,
// contiguous; reading checks every range against the file before copying.
#include "tensor/safetensors.h"

#include <bit>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/durable_file.h"
#include "runtime/resource_limits.h"
#include "tensor/copy.h"
#include "tensor/factory.h"
#include "tensor/views.h"

namespace spmd {
namespace {

using nlohmann::json;

// The format's dtype names.
constexpr std::pair<DType, const char*> kDTypeNames[] = {
    {DType::kF32, "F32"}, {DType::kF64, "F64"}, {DType::kBF16, "BF16"}, {DType::kF16, "F16"},
    {DType::kI32, "I32"}, {DType::kI64, "I64"}, {DType::kU8, "U8"},     {DType::kBool, "BOOL"}};

const char* format_name(DType dt) {
  for (const auto& [d, name] : kDTypeNames)
    if (d == dt) return name;
  SPMD_THROW(InvalidArgument, "safetensors: no name for dtype ", dtype_name(dt));
}

DType parse_format_dtype(const std::string& name, const std::string& path) {
  for (const auto& [d, n] : kDTypeNames)
    if (name == n) return d;
  SPMD_THROW(InvalidArgument, "load_safetensors: ", path, ": unsupported dtype '", name, "'");
}

uint64_t read_u64_le(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::vector<unsigned char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  SPMD_CHECK(in.good(), "load_safetensors: cannot open ", path);
  const std::streamsize size = in.tellg();
  check_memory_fits(str_cat("load_safetensors: ", path, " (", format_bytes(uint64_t(size)), ")"),
                    uint64_t(std::max<std::streamsize>(size, 0)));
  std::vector<unsigned char> bytes(size_t(std::max<std::streamsize>(size, 0)));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), size);
  SPMD_CHECK(in.good(), "load_safetensors: cannot read ", path);
  return bytes;
}

// One header entry: its dtype, shape and data offset, checked to lie within
// the `data_size` bytes after the header.
SafetensorsEntry parse_entry(const std::string& name, const json& entry, uint64_t data_size,
                             const std::string& path) {
  const std::string where = "load_safetensors: " + path + ": tensor '" + name + "'";
  SPMD_CHECK(entry.is_object() && entry.contains("dtype") && entry.contains("shape") &&
                 entry.contains("data_offsets"),
             where, " needs dtype, shape and data_offsets");
  SafetensorsEntry e;
  e.dtype = parse_format_dtype(entry.at("dtype").get<std::string>(), path);
  for (const json& d : entry.at("shape")) {
    SPMD_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, where, ": bad shape ",
               entry.at("shape").dump());
    e.shape.push_back(d.get<int64_t>());
  }
  const json& range = entry.at("data_offsets");
  SPMD_CHECK(range.is_array() && range.size() == 2 && range[0].is_number_unsigned() &&
                 range[1].is_number_unsigned(),
             where, ": bad data_offsets ", range.dump());
  const uint64_t begin = range[0].get<uint64_t>(), end = range[1].get<uint64_t>();
  const uint64_t nbytes = uint64_t(e.shape.numel()) * element_size(e.dtype);
  SPMD_CHECK(begin <= end && end <= data_size && end - begin == nbytes, where, ": data_offsets [",
             begin, ", ", end, ") do not hold ", nbytes, " bytes of ", e.shape, " ",
             dtype_name(e.dtype), " within ", data_size, " bytes of data");
  e.offset = begin;  // from the data's start until the caller adds the header's length
  return e;
}

// The header's n bytes of JSON, of a file of `size` bytes: every entry
// checked to lie within the file, its offset counted from the file's start.
SafetensorsIndex parse_header(const std::string& path, const unsigned char* header_json, uint64_t n,
                              uint64_t size) {
  json header;
  try {
    header = json::parse(header_json, header_json + n);
  } catch (const json::exception& e) {
    SPMD_THROW(InvalidArgument, "load_safetensors: ", path, ": the header is not JSON (", e.what(),
               ")");
  }
  SPMD_CHECK(header.is_object(), "load_safetensors: ", path, ": the header is not a JSON object");
  SafetensorsIndex index;
  try {
    for (const auto& [name, entry] : header.items()) {
      if (name != "__metadata__") {
        SafetensorsEntry e = parse_entry(name, entry, size - 8 - n, path);
        e.offset += 8 + n;
        index.entries[name] = std::move(e);
        continue;
      }
      for (const auto& [key, value] : entry.items()) {
        SPMD_CHECK(value.is_string(), "load_safetensors: ", path, ": metadata '", key,
                   "' is not a string");
        index.metadata[key] = value.get<std::string>();
      }
    }
  } catch (const json::exception& e) {  // a field of the wrong JSON type
    SPMD_THROW(InvalidArgument, "load_safetensors: ", path, ": malformed header (", e.what(), ")");
  }
  return index;
}

}  // namespace

void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const std::map<std::string, std::string>& metadata) {
  static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");
  json header = json::object();
  std::vector<Tensor> hosts;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    SPMD_CHECK(name != "__metadata__", "save_safetensors: '__metadata__' cannot name a tensor");
    SPMD_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    hosts.push_back(ops::contiguous(ops::to(t, Device::cpu())));
    const uint64_t nbytes = hosts.back().nbytes();
    header[name] = {{"dtype", format_name(t.dtype())},
                    {"shape", t.shape().to_vector()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned

  // Written, synced and checked (runtime/durable_file.h): a checkpoint's
  // shard or an export is on disk when this returns.
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(text.size() >> (8 * i));
  std::vector<ByteSpan> spans{{length, 8}, {text.data(), text.size()}};
  for (const Tensor& t : hosts) spans.push_back({t.raw_data(), size_t(t.nbytes())});
  try {
    write_durably(path, spans.data(), spans.size());
  } catch (const Error& e) {
    SPMD_THROW(Error, "save_safetensors: ", e.what());
  }
}

SafetensorsFile load_safetensors(const std::string& path) {
  const std::vector<unsigned char> bytes = read_file(path);
  SPMD_CHECK(bytes.size() >= 8, "load_safetensors: ", path, " is ", bytes.size(),
             " bytes, too short for a header");
  const uint64_t n = read_u64_le(bytes.data());
  SPMD_CHECK(n <= bytes.size() - 8, "load_safetensors: ", path, ": header length ", n,
             " runs past the end of the file (", bytes.size(), " bytes)");
  SafetensorsIndex index = parse_header(path, bytes.data() + 8, n, bytes.size());
  SafetensorsFile file;
  for (const auto& [name, e] : index.entries) {
    Tensor t = ops::empty(e.shape, {e.dtype, Device::cpu()});
    if (t.nbytes()) std::memcpy(t.raw_data(), bytes.data() + e.offset, t.nbytes());
    file.tensors[name] = t;
  }
  file.metadata = std::move(index.metadata);
  return file;
}

SafetensorsIndex read_safetensors_index(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  SPMD_CHECK(in.good(), "load_safetensors: cannot open ", path);
  const uint64_t size = uint64_t(in.tellg());
  SPMD_CHECK(size >= 8, "load_safetensors: ", path, " is ", size, " bytes, too short for a header");
  unsigned char length[8];
  in.seekg(0);
  in.read(reinterpret_cast<char*>(length), 8);
  const uint64_t n = read_u64_le(length);
  SPMD_CHECK(in.good() && n <= size - 8, "load_safetensors: ", path, ": header length ", n,
             " runs past the end of the file (", size, " bytes)");
  std::vector<unsigned char> header(n);
  in.read(reinterpret_cast<char*>(header.data()), std::streamsize(n));
  SPMD_CHECK(in.good(), "load_safetensors: cannot read the header of ", path);
  return parse_header(path, header.data(), n, size);
}

Tensor read_safetensors_rows(const std::string& path, const SafetensorsEntry& entry, int64_t begin,
                             int64_t end) {
  Shape shape = entry.shape;
  const int64_t rows = shape.ndim() == 0 ? 1 : shape[0];
  SPMD_CHECK(0 <= begin && begin <= end && end <= rows, "read_safetensors_rows: rows [", begin,
             ", ", end, ") of ", path, "'s ", entry.shape, " tensor");
  if (shape.ndim() > 0) shape[0] = end - begin;
  Tensor t = ops::empty(shape, {entry.dtype, Device::cpu()});
  const uint64_t row_bytes =
      rows > 0 ? uint64_t(entry.shape.numel() / rows) * element_size(entry.dtype) : 0;
  std::ifstream in(path, std::ios::binary);
  in.seekg(std::streamoff(entry.offset + uint64_t(begin) * row_bytes));
  in.read(static_cast<char*>(t.raw_data()), std::streamsize(t.nbytes()));
  SPMD_CHECK(in.good() || t.nbytes() == 0, "load_safetensors: cannot read rows [", begin, ", ", end,
             ") of a tensor of ", path, " (the file is shorter than its header says)");
  return t;
}

}  // namespace spmd
