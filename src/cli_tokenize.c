/* `kvtier tokenize` (placeholder until the tokenizer lands). */
#include <stdio.h>

#include "cli.h"

int kvt_cmd_tokenize(int argc, char **argv) {
    fprintf(stderr, "kvtier tokenize: not implemented yet\n");
    return 1;
}
