/* fuzz_config.c — broker/config.c: the INI file parser (libinih under it),
 * the command-line model spec and a key = value setting, on the input.  An
 * accepted file must leave a config whose arrays hold what their counts
 * say and whose strings are terminated. */
#include "fuzz.h"

#include <string.h>
#include <unistd.h>

#include "broker.h"

static void check_config(const scdb_broker_config *c)
{
    FUZZ_CHECK(memchr(c->endpoint, 0, sizeof c->endpoint));
    FUZZ_CHECK(memchr(c->data_dir, 0, sizeof c->data_dir));
    FUZZ_CHECK(c->n_models >= 0 && (c->n_models == 0 || c->models));
    FUZZ_CHECK(c->n_codebooks >= 0 && (c->n_codebooks == 0 || c->codebooks));
    FUZZ_CHECK(c->n_pairs >= 0 && (c->n_pairs == 0 || c->pairs));
    FUZZ_CHECK(c->n_policies >= 0 && (c->n_policies == 0 || c->policies));
    for (int i = 0; i < c->n_models; i++) {
        FUZZ_CHECK(memchr(c->models[i].name, 0, sizeof c->models[i].name));
        FUZZ_CHECK(memchr(c->models[i].config, 0, sizeof c->models[i].config));
    }
    for (int i = 0; i < c->n_codebooks; i++)
        FUZZ_CHECK(memchr(c->codebooks[i].file, 0, sizeof c->codebooks[i].file));
    for (int i = 0; i < c->n_pairs; i++)
        FUZZ_CHECK(memchr(c->pairs[i].file, 0, sizeof c->pairs[i].file));
    for (int i = 0; i < c->n_policies; i++)
        FUZZ_CHECK(memchr(c->policies[i].file, 0, sizeof c->policies[i].file));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    scdb_broker_config c;
    char err[512], path[64], *text, *eq;
    int fd;

    scdb_log_set_level(SCDB_LOG_OFF);
    scdb_broker_config_defaults(&c);
    fd = fuzz_memfd(data, size, path, sizeof path);
    scdb_broker_config_load(&c, path, err, sizeof err);
    close(fd);
    check_config(&c);
    /* the text as a model spec, then as one key = value */
    text = malloc(size + 1);
    FUZZ_CHECK(text);
    memcpy(text, data, size);
    text[size] = 0;
    scdb_broker_config_add_model(&c, text, err, sizeof err);
    check_config(&c);
    if ((eq = strchr(text, '='))) {
        *eq = 0;
        scdb_broker_config_set(&c, text, eq + 1, err, sizeof err);
        check_config(&c);
    }
    free(text);
    scdb_broker_config_clear(&c);
    return 0;
}
