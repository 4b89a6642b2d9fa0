/* `kvtier info` and `kvtier mkmodel` (placeholders). */
#include <stdio.h>

#include "cli.h"

int kvt_cmd_info(int argc, char **argv) {
    fprintf(stderr, "kvtier info: not implemented yet\n");
    return 1;
}

int kvt_cmd_mkmodel(int argc, char **argv) {
    fprintf(stderr, "kvtier mkmodel: not implemented yet\n");
    return 1;
}
