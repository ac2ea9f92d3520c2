/* progress.c — one progress report for a long loop, readable on a terminal
 * (one line redrawn in place) and in a log (whole lines, a bounded count):
 * scdb_common.h, "progress". */
#include "scdb_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* a terminal's line is redrawn at most this often */
#define REDRAW_S 0.1
/* a log gets a tenth of the work at most this often */
#define TENTH_S 1.0

void scdb_progress_begin(scdb_progress *p, FILE *f, long total)
{
    memset(p, 0, sizeof *p);
    p->f = f;
    p->tty = f && isatty(fileno(f));
    p->total = total > 0 ? total : 0;
    p->every_s = SCDB_PROGRESS_EVERY_S;
    p->clock = scdb_now;
    p->t_last = scdb_now();
}

static void draw(scdb_progress *p)
{
    size_t n = strlen(p->text);
    int pad = p->drawn > n ? (int)(p->drawn - n) : 0;   /* over a longer previous text */
    fprintf(p->f, "\r%s%*s", p->text, pad, "");
    fflush(p->f);
    p->drawn = n;
}

void scdb_progress_step(scdb_progress *p, long done, const char *fmt, ...)
{
    va_list ap;
    if (!p || !p->f) return;
    va_start(ap, fmt);
    vsnprintf(p->text, sizeof p->text, fmt, ap);
    va_end(ap);
    double now = p->clock(), since = now - p->t_last;
    long tenth = p->total > 0 ? (long)((double)done * 10.0 / (double)p->total) : 0;
    int due;
    if (p->tty) due = since >= REDRAW_S || (p->total > 0 && done >= p->total);
    else due = (tenth > p->tenth && since >= TENTH_S) || since >= p->every_s;
    p->shown = due;
    if (!due) return;
    p->t_last = now;
    if (tenth > p->tenth) p->tenth = tenth;
    if (p->tty) {
        draw(p);
    } else {
        fprintf(p->f, "%s\n", p->text);
        fflush(p->f);
    }
}

void scdb_progress_end(scdb_progress *p)
{
    if (!p || !p->f) return;
    if (p->tty) {
        if (!p->shown && p->text[0]) draw(p);
        if (p->drawn) fputc('\n', p->f);
    } else if (!p->shown && p->text[0]) {
        fprintf(p->f, "%s\n", p->text);
    }
    fflush(p->f);
    p->text[0] = '\0';
    p->shown = 0;
    p->drawn = 0;
}
