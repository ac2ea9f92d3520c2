/* broker_main.c — the scdb-broker executable (same as `scdb serve`). */
#include "broker.h"
#ifdef SCDB_HAVE_LLAMA
#include "gguf_ggml.h"
#endif

int main(int argc, char **argv)
{
#ifdef SCDB_HAVE_LLAMA
    scdb_gguf_ggml_install();     /* quantized GGUF models through ggml */
#endif
    return scdb_broker_main(argc, argv);
}
