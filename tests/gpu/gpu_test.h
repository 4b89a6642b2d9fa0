// SPDX-License-Identifier: MIT
/* Shared by the GPU tests: validation on, and a skip (exit 77, saying why)
 * where this build or machine has no Vulkan device. */
#ifndef KVT_GPU_TEST_H
#define KVT_GPU_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "testutil.h"

/* Turns the validation layer on (unless the caller's environment says
 * otherwise) and skips the test when there is no device to open. */
static inline void gpu_test_start(void) {
    setenv("KVT_VK_VALIDATION", "1", 0);
    if (!kvt_gpu_built()) kvt_test_skip("this build has no Vulkan backend (libvulkan-dev or glslc missing)");
    kvt_gpu_info *info;
    int n;
    static char why[512];
    if (kvt_gpu_list(&info, &n)) {
        snprintf(why, sizeof why, "no Vulkan: %s", kvt_errmsg());
        kvt_test_skip(why);
    }
    if (n == 0) kvt_test_skip("no Vulkan device (install mesa-vulkan-drivers for lavapipe)");
    printf("gpu: device 0 is '%s' (%s), validation %s\n", info[0].name, info[0].type,
           kvt_gpu_validation_on() ? "requested" : "off");
    free(info);
}

/* No validation message may have been seen but the deliberate ones. */
static inline void gpu_test_no_validation_messages(uint64_t deliberate) {
    uint64_t m = kvt_gpu_validation_count() - deliberate;
    CHECKF(m == 0, "%llu validation messages (logged above)", (unsigned long long)m);
}

#endif
