/*
 * hm-coll-mpi: Open MPI's own broadcast + reduce, the reference beside
 * hm-perf coll. Rank 0 times MPI_Bcast of S bytes followed by MPI_Reduce
 * of one 64-bit count (every rank gives 1), from the broadcast's start to
 * the reduce's end at the root, S = 0 (the count alone), 4 KiB and 1 MiB.
 * It prints the same JSON keys as hm-perf coll (tree "mpi", root_sends 0:
 * the count is not observable from MPI).
 *
 *   mpirun -np N hm-coll-mpi [--size 0,4K,1M] [--iters N] [--json]
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static size_t parse_size(const char *s, char **end)
{
    size_t v = strtoull(s, end, 10);
    if (**end == 'K' || **end == 'k') {
        v <<= 10;
        (*end)++;
    } else if (**end == 'M' || **end == 'm') {
        v <<= 20;
        (*end)++;
    }
    return v;
}

static void row(size_t size, int iters, int warmup, int rank, int nranks, int json)
{
    size_t bytes = size > 0 ? size : 8;
    char *buf = calloc(1, bytes);
    double *lat = calloc((size_t)iters, sizeof(*lat));
    uint64_t one = 1, sum = 0;
    for (int i = 0; i < warmup + iters; i++) {
        double t0 = MPI_Wtime();
        MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
        MPI_Reduce(&one, &sum, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
        if (i >= warmup)
            lat[i - warmup] = (MPI_Wtime() - t0) * 1e6;
        if (rank == 0 && sum != (uint64_t)nranks) {
            fprintf(stderr, "hm-coll-mpi: the reduce gave %llu\n", (unsigned long long)sum);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    if (rank == 0) {
        qsort(lat, (size_t)iters, sizeof(*lat), cmp_double);
        double med = lat[iters / 2], p99 = lat[(size_t)((iters - 1) * 0.99)];
        if (json)
            printf("{\"protocol\":\"mpi\",\"mode\":\"coll\",\"progress\":\"mpi\",\"test\":\"%s\","
                   "\"size\":%zu,\"ranks\":%d,\"tree\":\"mpi\",\"root_sends\":0,\"threads\":1,"
                   "\"contexts\":\"mpi\",\"inflight\":1,\"servers\":%d,\"iters\":%d,"
                   "\"min_us\":%.3f,\"median_us\":%.3f,\"p99_us\":%.3f,\"max_us\":%.3f,"
                   "\"rate_per_s\":%.1f,\"bandwidth_MBps\":%.2f,\"client_maxrss_kB\":0,"
                   "\"server_maxrss_kB\":0}\n",
                   size > 0 ? "bcast" : "noop", size, nranks, nranks - 1, iters, lat[0], med,
                   p99, lat[iters - 1], 1e6 / med, (double)size / med);
        else
            printf("mpi       %-6s %9zu %5d %-10s %10s %8d %9.2f %9.2f %9.2f %9.2f\n",
                   size > 0 ? "bcast" : "noop", size, nranks, "mpi", "-", iters, lat[0], med,
                   p99, lat[iters - 1]);
        fflush(stdout);
    }
    free(buf);
    free(lat);
}

int main(int argc, char **argv)
{
    size_t sizes[8] = {0, 4096, 1u << 20};
    int nsizes = 3, iters = 500, warmup = 50, json = 0, rank, nranks;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            iters = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
            char *p = argv[++i];
            for (nsizes = 0; nsizes < 8 && *p;) {
                sizes[nsizes++] = parse_size(p, &p);
                if (*p == ',')
                    p++;
            }
        }
    }
    if (iters < 1)
        iters = 1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (int s = 0; s < nsizes; s++)
        row(sizes[s], iters, warmup, rank, nranks, json);
    MPI_Finalize();
    return 0;
}
