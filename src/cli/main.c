// SPDX-License-Identifier: MIT
/* kvtier entry point: hands argv to the CLI dispatcher in cli.c. */
#include "cli.h"

int main(int argc, char **argv) { return kvt_cli_main(argc, argv); }
