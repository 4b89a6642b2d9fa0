/* `kvtier run` and `kvtier eval` (placeholders until the engine lands). */
#include <stdio.h>

#include "cli.h"

int kvt_cmd_run(int argc, char **argv) {
    fprintf(stderr, "kvtier run: not implemented yet\n");
    return 1;
}

int kvt_cmd_eval(int argc, char **argv) {
    fprintf(stderr, "kvtier eval: not implemented yet\n");
    return 1;
}
