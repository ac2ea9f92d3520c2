/* gguf_ggml.h — ggml's dequantization as scdb's GGUF dequantizer
 * (scdb_gguf_set_dequantizer, gguf.h), in builds with llama.cpp: its own
 * small library (scdb_gguf_ggml, linked by the scdb and scdb-broker
 * programs and by libscdb-llama), so that libscdb itself never needs
 * llama.cpp.  ggml's type numbering is the table's in gguf.h. */
#ifndef SCDB_GGUF_GGML_H
#define SCDB_GGUF_GGML_H

/* Install ggml's reference dequantization (ggml_get_type_traits(type)->
 * to_float of libggml-base: scalar code, the same values on every
 * machine) for every quantized type it has.  Idempotent; call before the
 * threads that read GGUF files start. */
void scdb_gguf_ggml_install(void);

#endif /* SCDB_GGUF_GGML_H */
