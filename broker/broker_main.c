/* broker_main.c — the scdb-broker executable (same as `scdb serve`). */
#include "broker.h"

int main(int argc, char **argv) { return scdb_broker_main(argc, argv); }
