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
#include <strings.h>

#include "cli.h"
#include "common.h"
#include "engine.h" /* the GPU engine's memory plan, for the start-up line */
#include "gpu.h"
#include "log.h"

#define DEVICE_HELP \
    "where the model runs (also -dev): cpu (the default) or vulkan[:N],\nthe Vulkan device N of `kvtier info " \
    "--devices` (0 when N is left\nout); llama.cpp's none (the CPU) and VulkanN (its N-th GPU) too.\nOn a GPU the weights and T0's KV pages live in device\nmemory; every architecture and " \
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

enum { SPLIT_MODE_ID = KVT_CLI_NGL_ID + 1, TENSOR_SPLIT_ID, MAIN_GPU_ID, NO_KV_OFFLOAD_ID };
_Static_assert(NO_KV_OFFLOAD_ID + 1 == KVT_CLI_LIST_DEVICES_ID, "the section's ids are one range");

static const kvt_cli_opt device_opts[] = {
    {KVT_CLI_DEVICE_ID, 0, "device", NULL, "DEV", DEVICE_HELP, 0, KVT_CLI_PLAIN},
    {KVT_CLI_GPU_MEM_ID, 0, "gpu-memory-fraction", NULL, "F", GPU_MEM_HELP, KVT_CLI_MIN_OPEN,
     KVT_CLI_RANGE(KVT_CLI_NUM, 0, 1)},
    {KVT_CLI_NGL_ID, 0, "n-gpu-layers", "gpu-layers", "N", NGL_HELP, 0, KVT_CLI_RANGE(KVT_CLI_INT, -1, INT32_MAX)},
    {MAIN_GPU_ID, 0, "main-gpu", NULL, "N",
     "with -ngl and no --device, the GPU to run on, in llama.cpp's\nnumbering (its VulkanN: GPUs, discrete ones "
     "first; also -mg)\n[0]",
     0, KVT_CLI_RANGE(KVT_CLI_INT, 0, 1023)},
    {SPLIT_MODE_ID, 0, "split-mode", NULL, "MODE",
     "accepted for llama.cpp command lines (also -sm): none, layer or\nrow. kvtier runs a model on one device, so "
     "there is nothing to\nsplit",
     0, KVT_CLI_PLAIN},
    {TENSOR_SPLIT_ID, 0, "tensor-split", NULL, "N0,N1,...",
     "llama.cpp's shares of the model per GPU (also -ts): kvtier runs a\nmodel on one device, so one non-zero "
     "share is read as --main-gpu\n(its position) and several are refused",
     0, KVT_CLI_PLAIN},
    {NO_KV_OFFLOAD_ID, 0, "no-kv-offload", NULL, NULL,
     "accepted with a note (also -nkvo): the KV of the GPU's layers stays\nin GPU memory while active (T0) and "
     "moves to host RAM (T1) when\nnot; --kv-active sizes the GPU's share",
     0, KVT_CLI_PLAIN},
    {KVT_CLI_LIST_DEVICES_ID, 0, "list-devices", NULL, NULL,
     "print the Vulkan devices, as kvtier info --devices, and exit", KVT_CLI_NO_ENV, KVT_CLI_PLAIN},
};
const kvt_cli_section kvt_cli_device_section = {"device", device_opts, KVT_ARRAY_LEN(device_opts)};

int kvt_cli_device_parse(const char *v, kvt_cli_device *out) {
    out->vulkan = 0;
    out->index = 0;
    if (!strcmp(v, "cpu") || !strcmp(v, "none")) return 0; /* none: llama.cpp's "no offload" */
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

/* The rank of a device type for -ngl's pick: discrete first, then integrated, virtual and other GPUs; 0 for a
 * CPU (lavapipe), never picked unless KVT_VK_AUTO_CPU=1 (tests) ranks it last. */
static int auto_rank(const char *type) {
    if (!strcmp(type, "discrete")) return 4;
    if (!strcmp(type, "integrated")) return 3;
    if (strcmp(type, "cpu")) return 2;
    const char *v = getenv("KVT_VK_AUTO_CPU");
    return v && !strcmp(v, "1") ? 1 : 0;
}

/* The GPUs of info[0..n) in the order -ngl picks from and llama.cpp numbers them (its VulkanN): by rank, then
 * by index, into *order (allocated, n entries; NULL when n is 0); their count. */
static int gpu_order(const kvt_gpu_info *info, int n, int **order_out) {
    int k = 0, *order = *order_out = n > 0 ? kvt_xcalloc((size_t)n, sizeof *order) : NULL;
    for (int r = 4; r > 0; r--)
        for (int i = 0; i < n; i++)
            if (auto_rank(info[i].type) == r) order[k++] = i;
    return k;
}

/* llama.cpp's device name VulkanN (any case) as a Vulkan device index into *index: 0, or -1 after printing why
 * (N past its GPUs). Without a GPU, Vulkan0 is device 0, as llama.cpp falls back to it. */
static int llama_device(const char *flag, const char *v, int *index) {
    long want = strtol(v + 6, NULL, 10);
    kvt_gpu_info *info = NULL;
    int n = 0, k = 0, *order = NULL;
    if (kvt_gpu_built() && !kvt_gpu_list(&info, &n)) k = gpu_order(info, n, &order);
    int rc = 0;
    if (want < k) *index = order[want];
    else if (k == 0 && want == 0 && n > 0) *index = 0;
    else {
        fprintf(stderr,
                "kvtier: %s %s: llama.cpp's %s is GPU %ld counting from 0 (discrete ones first); this machine has "
                "%d GPU%s (kvtier info --devices lists every Vulkan device; --device vulkan:N names one)\n",
                flag, v, v, want, k, k == 1 ? "" : "s");
        rc = -1;
    }
    free(order);
    free(info);
    return rc;
}

int kvt_cli_device_opt(const kvt_cli_arg *a, kvt_cli_device *out) {
    kvt_cli_device dev;
    const char *s = a->str ? a->str : "";
    if (strchr(s, ',')) {
        fprintf(stderr,
                "kvtier: %s %s: kvtier runs a model on one device; name one (cpu, vulkan:N or llama.cpp's "
                "VulkanN)\n",
                a->flag, s);
        return -1;
    }
    if (!strncasecmp(s, "vulkan", 6) && s[6] >= '0' && s[6] <= '9' && strspn(s + 6, "0123456789") == strlen(s + 6) &&
        strlen(s + 6) <= 4) {
        int index = 0;
        if (llama_device(a->flag, s, &index)) return -1;
        if (out) out->vulkan = 1, out->index = index, out->chosen = 1;
        return 0;
    }
    if (kvt_cli_device_parse(s, &dev)) {
        fprintf(stderr,
                "kvtier: %s must be cpu, vulkan or vulkan:N (N a device of `kvtier info --devices`; "
                "llama.cpp's none and VulkanN too), not '%s'\n",
                a->flag, a->str ? a->str : "");
        return -1;
    }
    if (dev.vulkan && check_vulkan(a->flag, a->str, dev.index)) return -1;
    if (out) out->vulkan = dev.vulkan, out->index = dev.index, out->chosen = 1;
    return 0;
}

int kvt_cli_device_auto(const char *who, kvt_cli_device *d) {
    if (d->main_gpu > 1 && d->chosen) { /* --main-gpu 0 is llama.cpp's default: nothing to contradict */
        fprintf(stderr,
                "kvtier %s: --main-gpu (or --tensor-split) and --device (or $KVTIER_DEVICE) both name the device: "
                "give one\n",
                who);
        return -1;
    }
    if (d->chosen || d->vulkan || !d->ngl_given || d->n_gpu_layers == 0) return 0;
    kvt_gpu_info *info = NULL;
    int n = 0, k = 0, cpus = 0, *order = NULL;
    char why[640] = "this build has no Vulkan";
    if (kvt_gpu_built() && kvt_gpu_list(&info, &n)) snprintf(why, sizeof why, "%s", kvt_errmsg());
    else if (kvt_gpu_built() && n == 0) snprintf(why, sizeof why, "the Vulkan loader lists no device");
    k = gpu_order(info, n, &order);
    for (int i = 0; i < n; i++) cpus += !strcmp(info[i].type, "cpu");
    const int want = d->main_gpu ? d->main_gpu - 1 : 0;
    int rc = 0;
    if (k == 0 && n > 0)
        snprintf(why, sizeof why, "Vulkan lists only %d CPU device%s (%s%s), where the CPU engine is faster", cpus,
                 cpus == 1 ? "" : "s", info[0].name, cpus > 1 ? ", ..." : "");
    if (want < k) {
        d->vulkan = 1;
        d->index = order[want];
        fprintf(stderr,
                "kvtier %s: -ngl %d with no --device: the model runs on vulkan:%d (%s, %s), as llama.cpp offloads "
                "with -ngl; --device cpu keeps it on the CPU\n",
                who, (int)d->n_gpu_layers, d->index, info[d->index].name, info[d->index].type);
    } else if (k > 0 || d->main_gpu > 1) {
        fprintf(stderr,
                "kvtier %s: GPU %d (--main-gpu, or --tensor-split's share): this machine has %d GPU%s, counted "
                "from 0 as llama.cpp counts them (discrete ones first; kvtier info --devices lists every Vulkan "
                "device)\n",
                who, want, k, k == 1 ? "" : "s");
        rc = -1;
    } else {
        fprintf(stderr,
                "kvtier %s: --n-gpu-layers (-ngl) is ignored: no GPU was found (%s), so the model runs on the CPU "
                "(--device vulkan:N runs it on Vulkan device N all the same)\n",
                who, why);
    }
    free(order);
    free(info);
    return rc;
}

/* --tensor-split: llama.cpp's shares per GPU, separated by ',' or '/'; one non-zero share is its GPU as
 * --main-gpu, all zero is llama.cpp's default (nothing to do), several are refused. */
static int tensor_split(const kvt_cli_arg *a, kvt_cli_device *out) {
    int at = -1, nonzero = 0, i = 0;
    for (const char *p = a->str;; i++) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || (*end && *end != ',' && *end != '/') || !(v >= 0) || i > 1023) {
            fprintf(stderr, "kvtier: %s takes shares like 3,1 or 0,1 (numbers of at least 0), got '%s'\n", a->flag,
                    a->str);
            return -1;
        }
        if (v > 0) nonzero++, at = i;
        if (!*end) break;
        p = end + 1;
    }
    if (nonzero > 1) {
        fprintf(stderr,
                "kvtier: %s %s shares the model over %d GPUs; kvtier runs a model on one device: name it with "
                "--main-gpu N or --device vulkan:N\n",
                a->flag, a->str, nonzero);
        return -1;
    }
    if (at >= 0 && out->main_gpu && out->main_gpu != at + 1) {
        fprintf(stderr, "kvtier: %s %s puts the model on GPU %d, and --main-gpu on GPU %d: give one\n", a->flag, a->str,
                at, out->main_gpu - 1);
        return -1;
    }
    if (at >= 0) out->main_gpu = at + 1;
    return 0;
}

int kvt_cli_device_opts(int id, const kvt_cli_arg *a, kvt_cli_device *out) {
    switch (id) {
    case KVT_CLI_GPU_MEM_ID: out->mem_fraction = (float)a->d; return 0;
    case KVT_CLI_NGL_ID: out->n_gpu_layers = (int32_t)a->i, out->ngl_given = 1; return 0;
    case MAIN_GPU_ID:
        if (out->main_gpu && out->main_gpu != a->i + 1) {
            fprintf(stderr, "kvtier: %s %ld and --tensor-split name different GPUs: give one\n", a->flag, (long)a->i);
            return -1;
        }
        out->main_gpu = (int)a->i + 1;
        return 0;
    case SPLIT_MODE_ID:
        if (strcmp(a->str, "none") && strcmp(a->str, "layer") && strcmp(a->str, "row")) {
            fprintf(stderr, "kvtier: %s takes none, layer or row, got '%s'\n", a->flag, a->str);
            return -1;
        }
        return 0;
    case TENSOR_SPLIT_ID: return tensor_split(a, out);
    case NO_KV_OFFLOAD_ID:
        fprintf(stderr,
                "kvtier: %s: accepted; the KV of the GPU's layers stays in GPU memory while active (T0) and moves "
                "to host RAM (T1, --kv-ram) when not; --kv-active sizes the GPU's share\n",
                a->flag);
        return 0;
    case KVT_CLI_LIST_DEVICES_ID: exit(kvt_cli_print_devices(stdout) ? 1 : 0);
    default: return kvt_cli_device_opt(a, out);
    }
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

/* llama: the device's name in llama.cpp's numbering (VulkanN, its GPUs), or -1 for a CPU-type device. */
static void print_device(FILE *f, const kvt_gpu_info *d, int llama) {
    if (llama >= 0)
        fprintf(f, "  vulkan:%d  %s  (llama.cpp's Vulkan%d%s)\n", d->index, d->name, llama,
                llama ? "" : "; -ngl with no --device runs here");
    else fprintf(f, "  vulkan:%d  %s  (a CPU: -ngl alone never picks it)\n", d->index, d->name);
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
    int *order, *llama = kvt_xcalloc((size_t)n, sizeof *llama);
    int k = gpu_order(info, n, &order);
    for (int i = 0; i < n; i++) llama[i] = -1;
    for (int j = 0; j < k; j++) llama[order[j]] = j;
    for (int i = 0; i < n; i++) print_device(f, &info[i], llama[i]);
    free(order);
    free(llama);
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
