// Printing (compared with PyTorch's repr of the same tensors) and safetensors
// files: a round trip of every dtype, a file whose bytes are worked out by
// hand from the format, numpy reading our file, and malformed files.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "reference.h"
#include "tensor/safetensors.h"

using namespace spmd;
using namespace spmd::test;
namespace fs = std::filesystem;

namespace {

fs::path temp_path(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("spmd_test_io_" + std::to_string(getpid()));
  fs::create_directories(dir);
  return dir / name;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

Tensor iota(const Shape& shape, DType dt = DType::kF32) {
  return ops::to(ops::reshape(ops::arange(0, double(shape.numel()), 1, {DType::kF64}), shape), dt);
}

}  // namespace

TEST_CASE("tensors print like PyTorch's repr", "[print]") {
  // The expected strings are what torch 1.13 prints for the same values.
  CHECK(to_string(ops::from_vector<double>({0.1, 0.2, 0.3, 0.4}, {2, 2})) ==
        "tensor([[0.1000, 0.2000],\n        [0.3000, 0.4000]], dtype=f64)");
  CHECK(to_string(ops::from_vector<float>({1, 2, 3}, {3})) == "tensor([1., 2., 3.])");
  CHECK(to_string(ops::from_vector<float>({1e-5f, 1}, {2})) == "tensor([1.0000e-05, 1.0000e+00])");
  CHECK(to_string(ops::scalar_tensor(3.5)) == "tensor(3.5000)");
  CHECK(to_string(ops::empty({0, 3})) == "tensor([], size=(0, 3))");
  CHECK(to_string(ops::empty({0})) == "tensor([])");
  CHECK(to_string(ops::zeros({2}, {DType::kI32})) == "tensor([0, 0], dtype=i32)");
  const bool flags[] = {true, false};
  CHECK(to_string(ops::from_vector<bool>(std::span<const bool>(flags), {2})) ==
        "tensor([ True, False])");
  CHECK(to_string(ops::from_vector<float>({NAN, 1.5, INFINITY}, {3})) ==
        "tensor([   nan, 1.5000,    inf])");
  CHECK(to_string(ops::zeros({2})) == "tensor([0., 0.])");
  CHECK(to_string(ops::to(ops::from_vector<float>({1, 2}, {2}), DType::kBF16)) ==
        "tensor([1., 2.], dtype=bf16)");
  CHECK(to_string(iota({2, 3, 4})) ==
        "tensor([[[ 0.,  1.,  2.,  3.],\n"
        "         [ 4.,  5.,  6.,  7.],\n"
        "         [ 8.,  9., 10., 11.]],\n\n"
        "        [[12., 13., 14., 15.],\n"
        "         [16., 17., 18., 19.],\n"
        "         [20., 21., 22., 23.]]])");
  CHECK(to_string(ops::div(iota({30}), 7.0)) ==
        "tensor([0.0000, 0.1429, 0.2857, 0.4286, 0.5714, 0.7143, 0.8571, 1.0000, 1.1429,\n"
        "        1.2857, 1.4286, 1.5714, 1.7143, 1.8571, 2.0000, 2.1429, 2.2857, 2.4286,\n"
        "        2.5714, 2.7143, 2.8571, 3.0000, 3.1429, 3.2857, 3.4286, 3.5714, 3.7143,\n"
        "        3.8571, 4.0000, 4.1429])");
  CHECK(to_string(iota({2000})) ==
        "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n"
        "        1.9990e+03])");
  CHECK(to_string(iota({100, 11}, DType::kI64)) ==
        "tensor([[   0,    1,    2,  ...,    8,    9,   10],\n"
        "        [  11,   12,   13,  ...,   19,   20,   21],\n"
        "        [  22,   23,   24,  ...,   30,   31,   32],\n"
        "        ...,\n"
        "        [1067, 1068, 1069,  ..., 1075, 1076, 1077],\n"
        "        [1078, 1079, 1080,  ..., 1086, 1087, 1088],\n"
        "        [1089, 1090, 1091,  ..., 1097, 1098, 1099]])");
  Tensor leaf = ops::zeros({1});
  leaf.requires_grad_();
  CHECK(to_string(leaf) == "tensor([0.], requires_grad=True)");
  // i64 values print exactly, even beyond 2^53.
  CHECK(to_string(ops::from_vector<int64_t>({9007199254740993}, {})) == "tensor(9007199254740993)");
}

TEST_CASE("safetensors round-trips every dtype, views and metadata", "[safetensors]") {
  const fs::path path = temp_path("round_trip.safetensors");
  TensorMap tensors;
  const DType all[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                       DType::kI32, DType::kI64, DType::kU8,   DType::kBool};
  for (DType dt : all) tensors[std::string("t_") + std::string(dtype_name(dt))] = iota({2, 3}, dt);
  tensors["transposed"] = ops::transpose(iota({3, 4}), 0, 1);  // saved contiguous
  tensors["scalar"] = ops::scalar_tensor(-7.25);
  tensors["empty"] = ops::zeros({0, 5});
  save_safetensors(path, tensors, {{"format", "pt"}, {"step", "12"}});
  const SafetensorsFile file = load_safetensors(path);
  CHECK(file.metadata == std::map<std::string, std::string>{{"format", "pt"}, {"step", "12"}});
  REQUIRE(file.tensors.size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    INFO(name);
    const Tensor& back = file.tensors.at(name);
    CHECK(back.dtype() == t.dtype());
    CHECK(back.shape() == t.shape());
    CHECK(ops::to_vector<double>(back) == ops::to_vector<double>(t));
  }
}

TEST_CASE("a safetensors file is the bytes the format prescribes", "[safetensors]") {
  const fs::path path = temp_path("by_hand.safetensors");
  save_safetensors(path, {{"a", ops::from_vector<float>({1, -2}, {2})},
                          {"b", ops::from_vector<int64_t>({258}, {1, 1})}});
  // JSON keys in order, offsets into the data, padded with spaces to 8 bytes.
  std::string header = R"({"a":{"data_offsets":[0,8],"dtype":"F32","shape":[2]},)"
                       R"("b":{"data_offsets":[8,16],"dtype":"I64","shape":[1,1]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string want(8, '\0');
  for (int i = 0; i < 8; ++i) want[size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
  want += header;
  want += std::string("\x00\x00\x80\x3f", 4) + std::string("\x00\x00\x00\xc0", 4);  // 1.0f, -2.0f
  want += std::string("\x02\x01\x00\x00\x00\x00\x00\x00", 8);                       // 258, LE
  CHECK(read_bytes(path) == want);
  CHECK(header.size() % 8 == 0);
}

TEST_CASE("numpy reads our safetensors files", "[safetensors][python]") {
  const fs::path path = temp_path("for_numpy.safetensors");
  const fs::path script = temp_path("read.py");
  save_safetensors(path, {{"w", ops::div(iota({3, 4}), 4.0)},
                          {"ids", iota({5}, DType::kI32)},
                          {"h", iota({2}, DType::kF16)}});
  // The dozen lines of numpy the header promises.
  write_bytes(script, R"(import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
kinds = {"F32": "<f4", "I32": "<i4", "F16": "<f2"}
def get(name):
    e = header[name]; b, end = e["data_offsets"]
    return np.frombuffer(data[b:end], dtype=kinds[e["dtype"]]).reshape(e["shape"])
assert np.array_equal(get("w"), np.arange(12, dtype=np.float32).reshape(3, 4) / 4)
assert get("ids").tolist() == [0, 1, 2, 3, 4]
assert get("h").tolist() == [0.0, 1.0]
print("numpy ok")
)");
  const std::string cmd = "/usr/bin/python3 " + script.string() + " " + path.string() + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  std::string output;
  while (fgets(buf, sizeof buf, pipe)) output += buf;
  const int status = pclose(pipe);
  INFO(output);
  CHECK(status == 0);
  CHECK(output.find("numpy ok") != std::string::npos);
}

TEST_CASE("malformed safetensors files throw naming the file and the fault", "[safetensors]") {
  const fs::path path = temp_path("bad.safetensors");
  auto with_header = [&](const std::string& json, const std::string& data = "") {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((json.size() >> (8 * i)) & 0xff);
    write_bytes(path, bytes + json + data);
  };
  write_bytes(path, "abc");
  CHECK_THROWS_WITH(load_safetensors(path), Catch::Contains("too short for a header"));
  with_header("{not json");
  CHECK_THROWS_WITH(load_safetensors(path), Catch::Contains("the header is not JSON"));
  with_header(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", "12345678");
  CHECK_THROWS_WITH(load_safetensors(path), Catch::Contains("tensor 'x': data_offsets [0, 16)"));
  with_header(R"({"x":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})", "12345678");
  CHECK_THROWS_WITH(load_safetensors(path), Catch::Contains("unsupported dtype 'C64'"));
  with_header(R"({"x":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", "12345678");
  CHECK_THROWS_WITH(load_safetensors(path), Catch::Contains("bad.safetensors"));
  CHECK_THROWS_WITH(load_safetensors(temp_path("missing.safetensors")),
                    Catch::Contains("cannot open"));
  CHECK_THROWS_WITH(save_safetensors(path, {{"__metadata__", ops::zeros({1})}}),
                    Catch::Contains("'__metadata__' cannot name a tensor"));
  fs::remove_all(path.parent_path());
}

TEST_CASE("a safetensors file's rows are read alone, from its header's offsets", "[safetensors]") {
  const std::string path = "/tmp/spmd_test_rows_" + std::to_string(::getpid()) + ".safetensors";
  const Tensor a = ops::arange(0, 60, 1, {DType::kF32});
  const Tensor m = ops::reshape(a, {5, 3, 4});
  const Tensor s = ops::scalar_tensor(7.5);
  save_safetensors(path, {{"m", m}, {"s", s}, {"b", ops::ones({2}, {DType::kBF16})}});
  const SafetensorsIndex index = read_safetensors_index(path);
  REQUIRE(index.entries.size() == 3);
  CHECK(index.entries.at("m").shape == Shape{5, 3, 4});
  CHECK(index.entries.at("b").dtype == DType::kBF16);
  const Tensor rows = read_safetensors_rows(path, index.entries.at("m"), 1, 3);
  CHECK(rows.shape() == Shape{2, 3, 4});
  CHECK(ops::to_vector<float>(rows) == ops::to_vector<float>(ops::narrow(m, 0, 1, 2)));
  CHECK(read_safetensors_rows(path, index.entries.at("m"), 4, 4).numel() == 0);
  CHECK(read_safetensors_rows(path, index.entries.at("s"), 0, 1).item<double>() == 7.5);
  CHECK_THROWS_WITH(read_safetensors_rows(path, index.entries.at("m"), 2, 6),
                    Catch::Contains("rows [2, 6)"));
  // A file cut short: the header still parses, its entries do not fit.
  fs::resize_file(path, fs::file_size(path) - 8);
  CHECK_THROWS_WITH(read_safetensors_index(path), Catch::Contains("do not hold"));
  fs::remove(path);
}
