// SPDX-License-Identifier: MIT
/* Where the forward pass runs: the --device option (and $KVTIER_DEVICE) shared
 * by run, serve and eval, and `kvtier info --devices`. A Vulkan device is
 * checked to exist here; whether the model runs on it is the engine's to say
 * when it is made. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "engine.h" /* the GPU engine's memory plan, for the start-up line */
#include "gpu.h"
#include "log.h"

#define DEVICE_HELP \
    "where the model runs: cpu (the default) or vulkan[:N], the\nVulkan device N of `kvtier info --devices` (0 " \
    "when N is left\nout). On a GPU the weights and T0's KV pages live in device\nmemory; every architecture and " \
    "weight type the CPU runs, with f16,\nf32 or q8_0 KV, runs there (docs/gpu.md); a model the device\ncannot " \
    "take is refused naming why"

#define GPU_MEM_HELP \
    "on a GPU, the share of its memory kvtier may take, 0 < F <= 1\n(default 0.9, as vLLM's " \
    "gpu_memory_utilization): the activations and\nthe weights come out of it and, without --kv-active, the KV " \
    "pool\n(T0) gets the rest; a --kv-active that does not fit is refused,\nnaming the largest that does"
#define NGL_HELP \
    "layers on the GPU, as llama.cpp's -ngl: with --device vulkan every\nlayer runs there (-1, 99 or N >= the " \
    "model's layers: the default);\na smaller N runs the first N layers there and the others and the\noutput " \
    "matrix on the CPU, each layer's KV where it runs (0: all on\nthe CPU); a model too large for the GPU is " \
    "refused naming the\nlargest N that would fit. Without --device, an N other than 0 puts\nthe model on the " \
    "first GPU, as llama.cpp does (never on lavapipe,\na CPU); ignored with --device cpu (also -ngl)"

static const kvt_cli_opt device_opts[] = {
    {KVT_CLI_DEVICE_ID, 0, "device", NULL, "DEV", DEVICE_HELP, 0, KVT_CLI_PLAIN},
    {KVT_CLI_GPU_MEM_ID, 0, "gpu-memory-fraction", NULL, "F", GPU_MEM_HELP, KVT_CLI_MIN_OPEN,
     KVT_CLI_RANGE(KVT_CLI_NUM, 0, 1)},
    {KVT_CLI_NGL_ID, 0, "n-gpu-layers", NULL, "N", NGL_HELP, 0, KVT_CLI_RANGE(KVT_CLI_INT, -1, INT32_MAX)},
};
const kvt_cli_section kvt_cli_device_section = {"device", device_opts, KVT_ARRAY_LEN(device_opts)};

int kvt_cli_device_parse(const char *v, kvt_cli_device *out) {
    out->vulkan = 0;
    out->index = 0;
    if (!strcmp(v, "cpu")) return 0;
    if (strncmp(v, "vulkan", 6)) return -1;
    out->vulkan = 1;
    if (!v[6]) return 0;
    if (v[6] != ':' || v[7] < '0' || v[7] > '9') return -1;
    char *end;
    long n = strtol(v + 7, &end, 10);
    if (*end || n < 0 || n > 1023) return -1;
    out->index = (int)n;
    return 0;
}

/* 0 when Vulkan device index exists, else -1 after printing why not. */
static int check_vulkan(const char *flag, const char *v, int index) {
    kvt_gpu_info *info = NULL;
    int n = 0;
    if (!kvt_gpu_built())
        fprintf(stderr,
                "kvtier: %s %s: no Vulkan device was found: this build has no Vulkan: install "
                "libvulkan-dev and glslc (scripts/setup.sh) and rebuild\n",
                flag, v);
    else if (kvt_gpu_list(&info, &n))
        fprintf(stderr, "kvtier: %s %s: no Vulkan device was found: %s\n", flag, v, kvt_errmsg());
    else if (n == 0)
        fprintf(stderr,
                "kvtier: %s %s: no Vulkan device was found (the Vulkan loader lists none: install a "
                "driver, e.g. mesa-vulkan-drivers)\n",
                flag, v);
    else if (index >= n)
        fprintf(stderr,
                "kvtier: %s %s: there is no Vulkan device %d (this machine has %d, 0..%d; kvtier info "
                "--devices lists them)\n",
                flag, v, index, n, n - 1);
    else {
        free(info);
        return 0;
    }
    free(info);
    return -1;
}

int kvt_cli_device_opt(const kvt_cli_arg *a, kvt_cli_device *out) {
    kvt_cli_device dev;
    if (kvt_cli_device_parse(a->str ? a->str : "", &dev)) {
        fprintf(stderr,
                "kvtier: %s must be cpu, vulkan or vulkan:N (N a device of `kvtier info --devices`), "
                "not '%s'\n",
                a->flag, a->str ? a->str : "");
        return -1;
    }
    if (dev.vulkan && check_vulkan(a->flag, a->str, dev.index)) return -1;
    if (out) out->vulkan = dev.vulkan, out->index = dev.index, out->chosen = 1;
    return 0;
}

/* The rank of a device type for -ngl's pick: discrete first, then integrated, virtual and other GPUs; 0 for a
 * CPU (lavapipe), never picked unless KVT_VK_AUTO_CPU=1 (tests) ranks it last. */
static int auto_rank(const char *type) {
    if (!strcmp(type, "discrete")) return 4;
    if (!strcmp(type, "integrated")) return 3;
    if (strcmp(type, "cpu")) return 2;
    const char *v = getenv("KVT_VK_AUTO_CPU");
    return v && !strcmp(v, "1") ? 1 : 0;
}

void kvt_cli_device_auto(const char *who, kvt_cli_device *d) {
    if (d->chosen || d->vulkan || !d->ngl_given || d->n_gpu_layers == 0) return;
    kvt_gpu_info *info = NULL;
    int n = 0, best = -1, rank = 0, cpus = 0;
    char why[640] = "this build has no Vulkan";
    if (kvt_gpu_built() && kvt_gpu_list(&info, &n)) snprintf(why, sizeof why, "%s", kvt_errmsg());
    else if (kvt_gpu_built() && n == 0) snprintf(why, sizeof why, "the Vulkan loader lists no device");
    for (int i = 0; i < n; i++) {
        int r = auto_rank(info[i].type);
        cpus += !strcmp(info[i].type, "cpu");
        if (r > rank) rank = r, best = i;
    }
    if (best < 0 && n > 0)
        snprintf(why, sizeof why, "Vulkan lists only %d CPU device%s (%s%s), where the CPU engine is faster", cpus,
                 cpus == 1 ? "" : "s", info[0].name, cpus > 1 ? ", ..." : "");
    if (best >= 0) {
        d->vulkan = 1;
        d->index = best;
        fprintf(stderr,
                "kvtier %s: -ngl %d with no --device: the model runs on vulkan:%d (%s, %s), as llama.cpp offloads "
                "with -ngl; --device cpu keeps it on the CPU\n",
                who, (int)d->n_gpu_layers, best, info[best].name, info[best].type);
    } else {
        fprintf(stderr,
                "kvtier %s: --n-gpu-layers (-ngl) is ignored: no GPU was found (%s), so the model runs on the CPU "
                "(--device vulkan:N runs it on Vulkan device N all the same)\n",
                who, why);
    }
    free(info);
}

int kvt_cli_device_opts(int id, const kvt_cli_arg *a, kvt_cli_device *out) {
    if (id == KVT_CLI_GPU_MEM_ID) out->mem_fraction = (float)a->d;
    else if (id == KVT_CLI_NGL_ID) out->n_gpu_layers = (int32_t)a->i, out->ngl_given = 1;
    else return kvt_cli_device_opt(a, out);
    return 0;
}

int32_t kvt_cli_device_engine(const kvt_cli_device *d) { return d->vulkan ? d->index + 1 : 0; }

void kvt_cli_device_apply(const char *who, const kvt_cli_device *d, kvt_engine_params *ep) {
    ep->device = kvt_cli_device_engine(d);
    if (d->mem_fraction > 0) ep->gpu_memory_fraction = d->mem_fraction;
    if (d->ngl_given && d->vulkan) ep->n_gpu_layers = d->n_gpu_layers;
    if (d->ngl_given && d->vulkan && d->n_gpu_layers == 0) { /* as llama.cpp's -ngl 0: no layer on the GPU */
        fprintf(stderr, "kvtier %s: --n-gpu-layers 0: every layer runs on the CPU, and so does the engine\n", who);
        ep->device = 0;
    }
    if (d->mem_fraction > 0 && !d->vulkan)
        fprintf(stderr,
                "kvtier %s: --gpu-memory-fraction is ignored: the model runs on the CPU (--device vulkan "
                "runs it on the GPU)\n",
                who);
    if (d->ngl_given && !d->vulkan && d->n_gpu_layers > 0 && d->chosen)
        fprintf(stderr,
                "kvtier %s: --n-gpu-layers (-ngl) is ignored: the model runs on the CPU, as --device cpu (or "
                "$KVTIER_DEVICE) says (--device vulkan runs it on the GPU)\n",
                who);
}

/* The value of a hand-written loop's --gpu-memory-fraction or --n-gpu-layers: 0, or -1 after printing why. */
static int gpu_value(const char *flag, const char *v, kvt_cli_device *out) {
    if (!strcmp(flag, "--n-gpu-layers")) {
        char *end;
        errno = 0;
        long n = strtol(v, &end, 10); /* -1 is a value here, so not kvt_cli_parse_long */
        if (errno || end == v || *end || n < -1 || n > INT32_MAX) {
            fprintf(stderr, "kvtier: %s must be an integer in [-1, %d], got '%s'\n", flag, INT32_MAX, v);
            return -1;
        }
        out->n_gpu_layers = (int32_t)n, out->ngl_given = 1;
        return 0;
    }
    double f = kvt_cli_parse_double(flag, v);
    if (f != f) return -1;
    if (!(f > 0 && f <= 1)) {
        fprintf(stderr, "kvtier: %s must be a number in (0, 1], got '%s'\n", flag, v);
        return -1;
    }
    out->mem_fraction = (float)f;
    return 0;
}

int kvt_cli_device_flag(int argc, char **argv, int *i, int *given, kvt_cli_device *out) {
    const char *a = argv[*i];
    int gpu = !strcmp(a, "--gpu-memory-fraction") || !strcmp(a, "--n-gpu-layers") || !strcmp(a, "-ngl");
    if (strcmp(a, "--device") && !gpu) return 0;
    const char *v = kvt_cli_value(argc, argv, i);
    if (!v) return -1;
    if (gpu) return gpu_value(!strcmp(a, "-ngl") ? "--n-gpu-layers" : a, v, out) ? -1 : 1;
    *given = 1;
    kvt_cli_arg arg = {.str = v, .flag = "--device"};
    return kvt_cli_device_opt(&arg, out) ? -1 : 1;
}

int kvt_cli_device_env(kvt_cli_device *out) {
    const char *v = getenv("KVTIER_DEVICE");
    if (!v) return 0;
    kvt_cli_arg arg = {.str = v, .flag = "$KVTIER_DEVICE"};
    return kvt_cli_device_opt(&arg, out);
}

static void print_device(FILE *f, const kvt_gpu_info *d) {
    fprintf(f, "  vulkan:%d  %s\n", d->index, d->name);
    fprintf(f, "    type %s, vendor 0x%04x, device 0x%04x, Vulkan %s\n", d->type, d->vendor_id, d->device_id, d->api);
    fprintf(f, "    driver %s\n", d->driver);
    for (int h = 0; h < d->n_heaps; h++)
        fprintf(f, "    memory heap %d: %.1f GiB%s\n", h, (double)d->heap_bytes[h] / (1 << 30),
                d->heap_device_local[h] ? " device-local" : "");
    fprintf(f, "    subgroup size %u, fp16 %s, int8 %s, largest storage binding %.0f MiB, timestamps %s\n",
            d->subgroup_size, d->fp16 ? "yes" : "no", d->int8 ? "yes" : "no", (double)d->max_binding / (1 << 20),
            d->timestamps ? "yes" : "no");
    if (d->coopmat)
        fprintf(f, "    cooperative matrices: %s; the tensor-core F16 matmul takes %ux%ux%u with KVT_VK_COOPMAT=1\n",
                d->coopmat_shapes, d->cm_m, d->cm_n, d->cm_k);
    else fprintf(f, "    cooperative matrices: %s (the F16 matmul stays subgroup-free)\n", d->coopmat_shapes);
}

int kvt_cli_print_devices(FILE *f) {
    if (!kvt_gpu_built()) {
        fprintf(f,
                "Vulkan devices: none: this build has no Vulkan: install libvulkan-dev and glslc "
                "(scripts/setup.sh) and rebuild\n");
        return 1;
    }
    kvt_gpu_info *info;
    int n;
    if (kvt_gpu_list(&info, &n)) {
        fprintf(f, "Vulkan devices: none: %s\n", kvt_errmsg());
        return 1;
    }
    if (n == 0) {
        fprintf(f,
                "Vulkan devices: none: the Vulkan loader lists no device (install a driver, e.g. "
                "mesa-vulkan-drivers for the CPU's lavapipe)\n");
        return 1;
    }
    fprintf(f, "Vulkan devices: %d (run, serve and eval take --device vulkan:N)\n", n);
    for (int i = 0; i < n; i++) print_device(f, &info[i]);
    free(info);
    return 0;
}

void kvt_cli_log_device_memory(const char *who, const kvt_engine *e) {
    kvt_engine_mem m;
    if (kvt_engine_device_memory(e, &m)) return;
    char desc[768], line[900];
    kvt_engine_describe_memory(e, desc, sizeof desc);
    snprintf(line, sizeof line, "%s: the engine runs on %s", who, desc);
    kvt_engine_params p = kvt_engine_get_params(e);
    kvt_log_field f[] = {
        {"device", KVT_LOG_STR, kvt_engine_device_name(e), 0, 0},
        {"device_bytes", KVT_LOG_UINT, NULL, (long long)m.device_bytes, 0},
        {"gpu_memory_fraction", KVT_LOG_REAL, NULL, 0, m.fraction},
        {"weight_bytes", KVT_LOG_UINT, NULL, (long long)m.weight_bytes, 0},
        {"act_bytes", KVT_LOG_UINT, NULL, (long long)m.act_bytes, 0},
        {"kv_bytes", KVT_LOG_UINT, NULL, (long long)m.kv_bytes, 0},
        {"kv_planned", KVT_LOG_BOOL, NULL, m.planned, 0},
        {"t0_pages", KVT_LOG_INT, NULL, m.n_pages, 0},
        {"t0_tokens", KVT_LOG_UINT, NULL, (long long)m.n_pages * p.block_size, 0},
        {"session_tokens", KVT_LOG_INT, NULL, p.n_ctx, 0},
        {"gpu_layers", KVT_LOG_INT, NULL, m.gpu_layers, 0},
        {"host_kv_bytes", KVT_LOG_UINT, NULL, (long long)m.host_kv_bytes, 0},
    };
    kvt_log_fields(KVT_LOG_INFO, line, f, KVT_ARRAY_LEN(f), line);
}
