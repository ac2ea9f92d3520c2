/*
 * scdb_llama_calib.h — calibration states computed by llama.cpp (`scdb
 * calibrate --engine llama.cpp`; docs/DESIGN.md "Calibrate" and
 * "llama.cpp").  Library scdb_llama_calib, beside libscdb-llama: it links
 * the codec (codec.h's scdb_calib_engine) and llama.cpp, so that neither
 * libscdb-llama nor the codec links the other.
 *
 * A state source holds, for each model of a calibration session, the GGUF
 * file(s) the reference engine loaded it from, loaded again in llama.cpp
 * (a LoRA adapter over its base model, the base loaded once), and one
 * llama.cpp context per model: F32 KV, flash attention off, one sequence.
 * For a window of token ids it decodes the window from position 0 while a
 * cb_eval callback copies `attn_norm-N` (the normalised attention input,
 * H_in of layer N) of every layer, then reads the sequence's K back
 * through its state blob (scdb_llama_seq_read: after RoPE, unpermuted into
 * scdb's convention, f32) and clears the sequence:
 *
 *   session window (token ids) --states()--> llama_decode, cb_eval:
 *                                              attn_norm-N -> h_in [L][n][d]
 *                                            blob of seq 0 -> k_post [L][n][kv]
 *
 * The session never needs K before RoPE or V: they are H_in Wk^T and
 * H_in Wv^T exactly (codec/calib.h, "Statistics"), with the consumer's
 * weights -- an adapter's merged.  Text is tokenized with the models' own
 * vocabulary (llama_tokenize, no BOS, special tokens as text); every model
 * added must have the producer's vocabulary, token for token.
 */
#ifndef SCDB_LLAMA_CALIB_H
#define SCDB_LLAMA_CALIB_H

#include "codec.h"
#include "model.h"
#include "scdb_err.h"
#include "scdb_llama.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct scdb_llama_states scdb_llama_states;

/* n_ctx: the longest window (the contexts' cells); n_threads: llama.cpp's
 * (0: 2).  *out owned by the caller (scdb_llama_states_free).  Errors:
 * scdb_llama_init's, SCDB_EINVAL, SCDB_ENOMEM. */
scdb_err scdb_llama_states_new(int n_ctx, int n_threads, scdb_llama_states **out, char *errbuf,
                               size_t errlen);
void scdb_llama_states_free(scdb_llama_states **s);

/* Add model m (borrowed: it must outlive s), loaded by the reference engine
 * from model_path (a llama GGUF model) or, with adapter_path, from that GGUF
 * LoRA adapter over model_path.  The first model added is the producer: the
 * tokenizer is its vocabulary's.  Errors: SCDB_EUNSUPPORTED (llama.cpp
 * cannot load the file, or its general.architecture is not "llama"; named),
 * SCDB_EMISMATCH (a vocabulary that is not the first model's: its type, size
 * or the first token that differs named; a shape that is not m's),
 * SCDB_EIO (the layout self-test's decode), scdb_llama_probe's,
 * SCDB_ERANGE (more models than a session holds), SCDB_ENOMEM.  errbuf
 * says which. */
scdb_err scdb_llama_states_add(scdb_llama_states *s, const scdb_model *m, const char *model_path,
                               const char *adapter_path, char *errbuf, size_t errlen);

/* 1 if the producer's tokenizer maps every byte to its own id 0..255 (the
 * family's byte vocabulary: token windows are byte windows). */
int scdb_llama_states_byte_vocab(const scdb_llama_states *s);
/* "BPE, 50257 tokens", ... : the producer's vocabulary, for messages. */
const char *scdb_llama_states_vocab_desc(const scdb_llama_states *s);

/* The engine to hand scdb_calib_set_engine (valid while s lives).  Its
 * calls fail with SCDB_ENOTFOUND for a model that was not added,
 * SCDB_ETOOBIG for a window over n_ctx, SCDB_EIO when llama_decode fails,
 * SCDB_EINVAL when a layer's H_in was not captured; the message in
 * scdb_llama_states_error. */
void scdb_llama_states_engine(scdb_llama_states *s, scdb_calib_engine *out);
const char *scdb_llama_states_error(const scdb_llama_states *s);

#ifdef __cplusplus
}
#endif

#endif /* SCDB_LLAMA_CALIB_H */
