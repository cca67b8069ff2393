/* mpi_bench: the OpenMPI peer of spmd-bench. The same sweep through MPI's
 * collectives, with spmd-bench's flags, columns and JSON lines, so that
 * bench/plot_collectives.py and bench/compare_collectives.sh can put the two
 * side by side. Built with mpicc, run over TCP alone:
 *
 *   mpicc -O2 -o mpi_bench bench/peers/mpi_bench.c
 *   mpirun -np 4 --oversubscribe --mca pml ob1 --mca btl self,tcp ./mpi_bench all_reduce -b 8 -e 256M -f 2
 *
 * Each op is the MPI call a user would make: MPI_Allreduce (in place),
 * MPI_Bcast, MPI_Reduce, MPI_Allgather, MPI_Reduce_scatter_block,
 * MPI_Alltoall, and MPI_Sendrecv around the ring. Sizes, counts, bus
 * factors and the time (mean over ranks of each rank's time per call, each
 * call blocking; -a as in spmd-bench) are computed as in spmd-bench
 * (bench/collectives/cases.h).
 * -c checks the results with spmd-bench's values (bench/collectives/values.h)
 * for float, double, int32 and int64 and sum, prod, min, max (MPI has no avg).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum op_kind { ALL_REDUCE, BROADCAST, REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, SENDRECV, NOPS };
static const char* op_names[NOPS] = {"all_reduce",     "broadcast",  "reduce",  "all_gather",
                                     "reduce_scatter", "all_to_all", "sendrecv"};

typedef struct {
  int ops[NOPS], nops;
  size_t min_bytes, max_bytes, step_bytes;
  double step_factor;
  int iters, warmup, checks, root, average;
  const char *dtype, *redop, *json;
} options;

static int rank_, size_;

static size_t parse_bytes(const char* s) {
  char* end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return (size_t)(v + 0.5);
}

static void usage_error(const char* what) {
  if (rank_ == 0) fprintf(stderr, "mpi_bench: %s\n", what);
  MPI_Abort(MPI_COMM_WORLD, 2);
}

static options parse(int argc, char** argv) {
  options o = {{0}, 0, 32u << 20, 32u << 20, 1u << 20, 1, 20, 5, 1, 0, 1, "float", "sum", NULL};
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (a[0] != '-') {
      char list[256];
      snprintf(list, sizeof list, "%s", a); /* one op, a comma-separated list, or all */
      for (char* name = strtok(list, ","); name; name = strtok(NULL, ",")) {
        const int before = o.nops;
        for (int k = 0; k < NOPS && o.nops < NOPS; ++k)
          if (!strcmp(name, "all") || !strcmp(name, op_names[k])) o.ops[o.nops++] = k;
        if (o.nops == before) usage_error("unknown op");
      }
      continue;
    }
    if (!v) usage_error("a flag lacks its value");
    ++i;
    if (!strcmp(a, "-b") || !strcmp(a, "--minbytes")) o.min_bytes = parse_bytes(v);
    else if (!strcmp(a, "-e") || !strcmp(a, "--maxbytes")) o.max_bytes = parse_bytes(v);
    else if (!strcmp(a, "-i") || !strcmp(a, "--stepbytes")) o.step_bytes = parse_bytes(v);
    else if (!strcmp(a, "-f") || !strcmp(a, "--stepfactor")) o.step_factor = atof(v);
    else if (!strcmp(a, "-n") || !strcmp(a, "--iters")) o.iters = atoi(v);
    else if (!strcmp(a, "-w") || !strcmp(a, "--warmup_iters")) o.warmup = atoi(v);
    else if (!strcmp(a, "-c") || !strcmp(a, "--check")) o.checks = atoi(v);
    else if (!strcmp(a, "-r") || !strcmp(a, "--root")) o.root = atoi(v);
    else if (!strcmp(a, "-a") || !strcmp(a, "--average")) o.average = atoi(v);
    else if (!strcmp(a, "-d") || !strcmp(a, "--datatype")) o.dtype = v;
    else if (!strcmp(a, "-o") || !strcmp(a, "--op")) o.redop = v;
    else if (!strcmp(a, "--json")) o.json = v;
    else usage_error("unknown flag");
  }
  if (o.nops == 0) usage_error("name an op (or all)");
  if (o.average < 0 || o.average > 3) usage_error("-a: 0 (rank 0), 1 (mean), 2 (min) or 3 (max)");
  return o;
}

/* --- Values (spmd-bench's, bench/collectives/values.h) --------------------------- */

static uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static double input_value(int prod, int r, size_t i) {
  const uint64_t h = mix(mix((uint64_t)i) ^ (uint64_t)(r + 1));
  static const double factors[4] = {-2, -1, 1, 2};
  return prod ? factors[h & 3] : (double)((int)(h & 15) - 8);
}

static double reduced_value(MPI_Op op, int p, size_t i) {
  const int prod = op == MPI_PROD;
  double acc = input_value(prod, 0, i);
  for (int r = 1; r < p; ++r) {
    const double v = input_value(prod, r, i);
    if (op == MPI_SUM) acc += v;
    if (op == MPI_PROD) acc *= v;
    if (op == MPI_MIN) acc = v < acc ? v : acc;
    if (op == MPI_MAX) acc = v > acc ? v : acc;
  }
  return acc;
}

typedef struct {
  MPI_Datatype type;
  size_t elem;
  const char* name;
} dtype_info;

static dtype_info find_dtype(const char* name) {
  if (!strcmp(name, "float") || !strcmp(name, "f32")) return (dtype_info){MPI_FLOAT, 4, "float"};
  if (!strcmp(name, "double") || !strcmp(name, "f64")) return (dtype_info){MPI_DOUBLE, 8, "double"};
  if (!strcmp(name, "int32") || !strcmp(name, "i32")) return (dtype_info){MPI_INT32_T, 4, "int32"};
  if (!strcmp(name, "int64") || !strcmp(name, "i64")) return (dtype_info){MPI_INT64_T, 8, "int64"};
  usage_error("-d: float, double, int32 or int64");
  return (dtype_info){MPI_FLOAT, 4, "float"};
}

static MPI_Op find_redop(const char* name) {
  if (!strcmp(name, "sum")) return MPI_SUM;
  if (!strcmp(name, "prod")) return MPI_PROD;
  if (!strcmp(name, "min")) return MPI_MIN;
  if (!strcmp(name, "max")) return MPI_MAX;
  usage_error("-o: sum, prod, min or max");
  return MPI_SUM;
}

static void put(const dtype_info* t, void* buf, size_t i, double v) {
  if (t->type == MPI_FLOAT) ((float*)buf)[i] = (float)v;
  else if (t->type == MPI_DOUBLE) ((double*)buf)[i] = v;
  else if (t->type == MPI_INT32_T) ((int32_t*)buf)[i] = (int32_t)v;
  else ((int64_t*)buf)[i] = (int64_t)v;
}

static double get(const dtype_info* t, const void* buf, size_t i) {
  if (t->type == MPI_FLOAT) return ((const float*)buf)[i];
  if (t->type == MPI_DOUBLE) return ((const double*)buf)[i];
  if (t->type == MPI_INT32_T) return (double)((const int32_t*)buf)[i];
  return (double)((const int64_t*)buf)[i];
}

/* --- One case --------------------------------------------------------------------- */

typedef struct {
  int op;
  dtype_info t;
  MPI_Op redop;
  int root;
  size_t count, in_count, out_count, size_bytes;
  void *in, *out;
} bench_case;

static int reduces(int op) { return op == ALL_REDUCE || op == REDUCE || op == REDUCE_SCATTER; }

static void shape(bench_case* c, size_t bytes) {
  const size_t total = bytes / c->t.elem, p = (size_t)size_;
  c->count = (c->op == ALL_GATHER || c->op == REDUCE_SCATTER || c->op == ALL_TO_ALL) ? total / p : total;
  c->in_count = c->out_count = c->count;
  if (c->op == ALL_GATHER) c->out_count = c->count * p;
  if (c->op == REDUCE_SCATTER || c->op == ALL_TO_ALL) c->in_count = c->count * p;
  if (c->op == ALL_TO_ALL) c->out_count = c->count * p;
  if (c->op == ALL_REDUCE || c->op == BROADCAST || c->op == REDUCE) c->out_count = 0;
  c->size_bytes = (c->in_count > c->out_count ? c->in_count : c->out_count) * c->t.elem;
}

static void call(bench_case* c) {
  const int m = (int)c->count, right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
  MPI_Datatype T = c->t.type;
  switch (c->op) {
    case ALL_REDUCE: MPI_Allreduce(MPI_IN_PLACE, c->in, m, T, c->redop, MPI_COMM_WORLD); break;
    case BROADCAST: MPI_Bcast(c->in, m, T, c->root, MPI_COMM_WORLD); break;
    case REDUCE:
      MPI_Reduce(rank_ == c->root ? MPI_IN_PLACE : c->in, rank_ == c->root ? c->in : NULL, m, T,
                 c->redop, c->root, MPI_COMM_WORLD);
      break;
    case ALL_GATHER: MPI_Allgather(c->in, m, T, c->out, m, T, MPI_COMM_WORLD); break;
    case REDUCE_SCATTER: MPI_Reduce_scatter_block(c->in, c->out, m, T, c->redop, MPI_COMM_WORLD); break;
    case ALL_TO_ALL: MPI_Alltoall(c->in, m, T, c->out, m, T, MPI_COMM_WORLD); break;
    case SENDRECV:
      MPI_Sendrecv(c->in, m, T, right, 0, c->out, m, T, left, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      break;
  }
}

static void fill(bench_case* c) {
  const int prod = reduces(c->op) && c->redop == MPI_PROD;
  for (size_t i = 0; i < c->in_count; ++i) {
    const int holds = c->op != BROADCAST || rank_ == c->root;
    put(&c->t, c->in, i, holds ? input_value(prod, rank_, i) : 1000);
  }
  for (size_t i = 0; i < c->out_count; ++i) put(&c->t, c->out, i, 1000);
}

static long long count_wrong(bench_case* c) {
  const size_t m = c->count, p = (size_t)size_;
  const int prod = reduces(c->op) && c->redop == MPI_PROD, r = rank_;
  long long wrong = 0;
  for (size_t i = 0; i < c->in_count; ++i) {
    double want = input_value(prod, r, i); /* inputs stay as they were ... */
    if (c->op == ALL_REDUCE || (c->op == REDUCE && r == c->root)) want = reduced_value(c->redop, size_, i);
    if (c->op == BROADCAST) want = input_value(0, c->root, i);
    wrong += get(&c->t, c->in, i) != want;
  }
  for (size_t i = 0; i < c->out_count; ++i) {
    double want = 0;
    if (c->op == ALL_GATHER) want = input_value(0, (int)(i / m), i % m);
    if (c->op == REDUCE_SCATTER) want = reduced_value(c->redop, size_, (size_t)r * m + i);
    if (c->op == ALL_TO_ALL) want = input_value(0, (int)(i / m), (size_t)r * m + i % m);
    if (c->op == SENDRECV) want = input_value(0, (r + size_ - 1) % size_, i);
    wrong += get(&c->t, c->out, i) != want;
  }
  (void)p;
  return wrong;
}

/* --- The sweep -------------------------------------------------------------------- */

static double bus_factor(int op) {
  const double p = size_;
  if (op == ALL_REDUCE) return 2 * (p - 1) / p;
  if (op == ALL_GATHER || op == REDUCE_SCATTER || op == ALL_TO_ALL) return (p - 1) / p;
  return 1;
}

static long long measure(bench_case* c, const options* o, FILE* json) {
  c->in = calloc(c->in_count ? c->in_count : 1, c->t.elem);
  c->out = calloc(c->out_count ? c->out_count : 1, c->t.elem);
  for (int i = 0; i < o->warmup; ++i) call(c);
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int i = 0; i < o->iters; ++i) call(c);
  const double mine = (MPI_Wtime() - start) / o->iters;
  double sums[2] = {rank_ == 0 ? mine : 0, 0}, extremes[2] = {mine, -mine}, mean = mine;
  for (int i = 0; i < o->checks; ++i) {
    fill(c);
    call(c);
    sums[1] += (double)count_wrong(c);
  }
  MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, extremes, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &mean, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  free(c->in);
  free(c->out);
  /* -a: rank 0's time, the mean, the fastest rank's or the slowest rank's */
  const double times[4] = {sums[0], mean / size_, -extremes[1], extremes[0]};
  const double t = times[o->average], algbw = (double)c->size_bytes / t / 1e9;
  const double busbw = algbw * bus_factor(c->op);
  const char* redop = reduces(c->op) ? o->redop : "none";
  const int root = (c->op == BROADCAST || c->op == REDUCE) ? c->root : -1;
  if (rank_ == 0) {
    printf("  %10zu  %12zu  %8s  %6s  %6d  %9.1f  %7.3f  %7.3f  %6lld\n", c->size_bytes, c->count,
           c->t.name, redop, root, t * 1e6, algbw, busbw, (long long)sums[1]);
    fflush(stdout);
    if (json) {
      fprintf(json,
              "{\"op\":\"%s\",\"size\":%zu,\"count\":%zu,\"type\":\"%s\",\"redop\":\"%s\","
              "\"root\":%d,\"time_us\":%.3f,\"algbw\":%.6f,\"busbw\":%.6f,\"wrong\":%lld,"
              "\"nranks\":%d,\"impl\":\"openmpi-tcp\"}\n",
              op_names[c->op], c->size_bytes, c->count, c->t.name, redop, root, t * 1e6, algbw,
              busbw, (long long)sums[1], size_);
      fflush(json);
    }
  }
  return (long long)sums[1];
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  const options o = parse(argc, argv);
  FILE* json = (rank_ == 0 && o.json) ? fopen(o.json, "w") : NULL;
  if (rank_ == 0) {
    printf("# mpi_bench: %d ranks, OpenMPI, -b %zu -e %zu -f %g -n %d -w %d -c %d\n#\n", size_,
           o.min_bytes, o.max_bytes, o.step_factor, o.iters, o.warmup, o.checks);
    printf("# %10s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s\n", "size", "count", "type", "redop",
           "root", "time", "algbw", "busbw", "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s\n", "(B)", "(elements)", "", "", "",
           "(us)", "(GB/s)", "(GB/s)", "");
  }
  long long wrong = 0;
  for (int k = 0; k < o.nops; ++k) {
    if (rank_ == 0) printf("# %s\n", op_names[o.ops[k]]);
    size_t last = 0;
    for (size_t bytes = o.min_bytes; bytes <= o.max_bytes;) {
      bench_case c = {o.ops[k], find_dtype(o.dtype), find_redop(o.redop), o.root, 0, 0, 0, 0, NULL, NULL};
      shape(&c, bytes);
      if (c.count > 0 && c.size_bytes != last) wrong += measure(&c, &o, json);
      last = c.size_bytes;
      const size_t next = o.step_factor > 1 ? (size_t)(bytes * o.step_factor) : bytes + o.step_bytes;
      if (next <= bytes) break;
      bytes = next;
    }
  }
  if (rank_ == 0) printf("# Wrong values       : %lld %s\n", wrong, wrong ? "FAILED" : "OK");
  if (json) fclose(json);
  MPI_Finalize();
  return wrong ? 1 : 0;
}
