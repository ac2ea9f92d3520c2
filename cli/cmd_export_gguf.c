/* cmd_export_gguf.c — `scdb export-gguf`: a model directory or a LoRA
 * adapter written as the GGUF file llama.cpp loads (model.h, "GGUF
 * export").  Exit codes: 0 written, 1 refused or not written, 2 usage. */
#include <stdio.h>
#include <string.h>

#include "model.h"
#include "peft_adapter.h"
#include "scdb_cli.h"
#include "weights_fp.h"

static void help(void)
{
    printf("usage: scdb export-gguf SRC -o OUT.gguf [--dtype f32|f16|bf16] [--models-dir DIR]\n\n"
           "Write SRC as a llama-architecture GGUF file that llama.cpp loads:\n\n"
           "  SRC a model      a model directory (scdb's own layout, e.g. data/models/base,\n"
           "                   or a Hugging Face Llama checkpoint) or a GGUF model: a GGUF\n"
           "                   model with the byte vocabulary (tokenizer.ggml.model \"rwkv\",\n"
           "                   token i = \"\\xNN\": llama_tokenize maps every byte to its own\n"
           "                   id 0-255, no BOS/EOS).  Only models with vocab_size 256.\n"
           "  SRC an adapter   a PEFT LoRA adapter directory (e.g. data/adapters/c-header)\n"
           "                   or a GGUF adapter: a GGUF LoRA adapter (general.type\n"
           "                   \"adapter\") for llama.cpp's llama_adapter_lora_init.  It names\n"
           "                   its base (general.base_model.0.name = the base's name, e.g.\n"
           "                   \"base\"); scdb finds the base of a GGUF adapter as NAME.gguf\n"
           "                   beside it (or in --models-dir), so export the base into the\n"
           "                   same folder as NAME.gguf.\n\n"
           "llama.cpp rotates adjacent pairs in RoPE where scdb rotates halves: the rows\n"
           "of attn_q and attn_k (and an adapter's lora_b of them) are permuted head by\n"
           "head, as llama.cpp's own converter does; scdb undoes it when it loads a GGUF.\n\n"
           "options:\n"
           "  -o, --output FILE   the GGUF file to write (atomically: FILE.tmp, rename)\n"
           "  --dtype f32|f16|bf16  the matrices' type (default f32; norms stay f32).\n"
           "                      f32 is exact: the file loads back to the same weights,\n"
           "                      logits and fingerprint (scdb fingerprint OUT.gguf prints\n"
           "                      the fingerprint of SRC).\n"
           "  --models-dir DIR    where a PEFT adapter's base is looked up by name\n\n"
           "Every command that takes a model directory also takes a GGUF model or adapter\n"
           "(scdb fingerprint, calibrate --producer/--consumer, audit, the broker's model\n"
           "config); schema/FORMATS.md, \"GGUF\", has the layout and the rules.\n"
           "Exit 0 written, 1 refused (the reason on stderr), 2 usage error.\n");
}

int cli_cmd_export_gguf(int argc, char **argv)
{
    const char *src = NULL, *out = NULL, *models_dir = NULL, *dts = "f32";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help();
            return 0;
        }
        if (!strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "--dtype") || !strcmp(a, "--models-dir")) {
            if (i + 1 == argc) {
                fprintf(stderr, "scdb export-gguf: %s needs a value\n", a);
                return SCDB_CLI_USAGE;
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--dtype")) dts = v;
            else if (!strcmp(a, "--models-dir")) models_dir = v;
            else out = v;
            continue;
        }
        if (a[0] == '-') {
            fprintf(stderr, "scdb export-gguf: unknown option '%s' (try scdb export-gguf --help)\n", a);
            return SCDB_CLI_USAGE;
        }
        if (src) {
            fprintf(stderr, "scdb export-gguf: one SRC only ('%s' and '%s')\n", src, a);
            return SCDB_CLI_USAGE;
        }
        src = a;
    }
    if (!src || !out) {
        fprintf(stderr, "scdb export-gguf: give SRC and -o OUT.gguf (try scdb export-gguf --help)\n");
        return SCDB_CLI_USAGE;
    }
    scdb_dtype dt;
    if (!strcmp(dts, "f32")) dt = SCDB_F32;
    else if (!strcmp(dts, "f16")) dt = SCDB_F16;
    else if (!strcmp(dts, "bf16")) dt = SCDB_BF16;
    else {
        fprintf(stderr, "scdb export-gguf: --dtype '%s': want f32, f16 or bf16\n", dts);
        return SCDB_CLI_USAGE;
    }
    char err[768] = "", fp[SCDB_WEIGHTS_FP_HEX + 1] = "";
    scdb_err e;
    int adapter = scdb_adapter_is(src);
    if (adapter) {
        e = scdb_adapter_export_gguf(src, models_dir, out, dt, err, sizeof err);
    } else {
        scdb_model *m = NULL;
        scdb_model_load_opts o = {.models_dir = models_dir};
        e = scdb_model_load_ex(src, &o, &m, err, sizeof err);
        if (!e) e = scdb_model_export_gguf(m, out, dt, err, sizeof err);
        scdb_model_free(&m);
    }
    if (e) {
        fprintf(stderr, "scdb export-gguf: %s (%s)\n", err[0] ? err : src, scdb_strerror(e));
        return SCDB_CLI_REFUSED;
    }
    printf("wrote %s (%s, %s)\n", out, adapter ? "LoRA adapter" : "model", dts);
    if (!scdb_weights_fp_ex(out, models_dir, fp, err, sizeof err))
        printf("fingerprint %s\n", fp);
    else if (adapter)
        printf("its base is looked up by name beside it: export the base there as NAME.gguf "
               "(general.base_model.0.name)\n");
    return 0;
}
