/* log_lines.h — counting a log file's lines that name something (cmocka
 * tests that check what a broker or store logged, and how often). */
#ifndef SCDB_TEST_LOG_LINES_H
#define SCDB_TEST_LOG_LINES_H

#include <stdio.h>
#include <string.h>

/* Lines of `path` that contain `needle` (-1: cannot read it). */
static inline int scdb_test_count_lines(const char *path, const char *needle)
{
    char line[2048];
    int n = 0;
    FILE *fp = fopen(path, "r");
    if (!fp) return -1;
    while (fgets(line, sizeof line, fp))
        if (strstr(line, needle)) n++;
    fclose(fp);
    return n;
}

#endif
