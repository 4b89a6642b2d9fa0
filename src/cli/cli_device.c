// SPDX-License-Identifier: MIT
/* Where the forward pass runs: the --device option (and $KVTIER_DEVICE) shared
 * by run, serve and eval, and `kvtier info --devices`. A Vulkan device is
 * checked to exist here; whether the model runs on it is the engine's to say
 * when it is made. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "gpu.h"

#define DEVICE_HELP \
    "where the model runs: cpu (the default) or vulkan[:N], the\nVulkan device N of `kvtier info --devices` (0 " \
    "when N is left\nout). On a GPU the weights and T0's KV pages live in device\nmemory; llama-style models with " \
    "F32, F16 or Q8_0 weights and\nf16 or f32 KV run there, others are refused naming why"

static const kvt_cli_opt device_opts[] = {
    {KVT_CLI_DEVICE_ID, 0, "device", NULL, "DEV", DEVICE_HELP, 0, KVT_CLI_PLAIN},
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
    if (out) *out = dev;
    return 0;
}

int32_t kvt_cli_device_engine(const kvt_cli_device *d) { return d->vulkan ? d->index + 1 : 0; }

int kvt_cli_device_flag(int argc, char **argv, int *i, int *given, kvt_cli_device *out) {
    if (strcmp(argv[*i], "--device")) return 0;
    const char *v = kvt_cli_value(argc, argv, i);
    if (!v) return -1;
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
