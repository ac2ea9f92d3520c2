/* linalg.c — the small dense solvers calibration needs, in double precision:
 * Cholesky factor/solve (ridge least squares) and a cyclic Jacobi
 * eigen-decomposition of symmetric matrices (PCA, reduced-rank regression).
 * Matrices here are at most a few hundred wide, so plain loops suffice. */
#include "codec_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int cx_cholesky(double *A, int n)
{
    for (int j = 0; j < n; j++) {
        double s = A[(size_t)j * n + j];
        for (int k = 0; k < j; k++) s -= A[(size_t)j * n + k] * A[(size_t)j * n + k];
        if (!(s > 0)) return -1;
        double d = sqrt(s);
        A[(size_t)j * n + j] = d;
        for (int i = j + 1; i < n; i++) {
            double t = A[(size_t)i * n + j];
            for (int k = 0; k < j; k++) t -= A[(size_t)i * n + k] * A[(size_t)j * n + k];
            A[(size_t)i * n + j] = t / d;
        }
        for (int i = 0; i < j; i++) A[(size_t)i * n + j] = 0.0;
    }
    return 0;
}

void cx_chol_solve(const double *Lf, int n, double *B, int m)
{
    /* forward: L Y = B */
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < i; k++) {
            double l = Lf[(size_t)i * n + k];
            if (l == 0.0) continue;
            for (int c = 0; c < m; c++) B[(size_t)i * m + c] -= l * B[(size_t)k * m + c];
        }
        double d = Lf[(size_t)i * n + i];
        for (int c = 0; c < m; c++) B[(size_t)i * m + c] /= d;
    }
    /* backward: L^T X = Y */
    for (int i = n - 1; i >= 0; i--) {
        for (int k = i + 1; k < n; k++) {
            double l = Lf[(size_t)k * n + i];
            if (l == 0.0) continue;
            for (int c = 0; c < m; c++) B[(size_t)i * m + c] -= l * B[(size_t)k * m + c];
        }
        double d = Lf[(size_t)i * n + i];
        for (int c = 0; c < m; c++) B[(size_t)i * m + c] /= d;
    }
}

void cx_sym_eig(double *A, int n, double *w, double *V)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) V[(size_t)i * n + j] = i == j;
    for (int sweep = 0; sweep < 60; sweep++) {
        double off = 0.0, diag = 0.0;
        for (int i = 0; i < n; i++) {
            diag += A[(size_t)i * n + i] * A[(size_t)i * n + i];
            for (int j = i + 1; j < n; j++) off += A[(size_t)i * n + j] * A[(size_t)i * n + j];
        }
        if (off <= 1e-24 * (diag + 1e-300)) break;
        for (int p = 0; p < n - 1; p++)
            for (int q = p + 1; q < n; q++) {
                double apq = A[(size_t)p * n + q];
                if (fabs(apq) < 1e-300) continue;
                double app = A[(size_t)p * n + p], aqq = A[(size_t)q * n + q];
                double theta = (aqq - app) / (2.0 * apq);
                double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
                double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
                for (int k = 0; k < n; k++) {   /* columns p, q */
                    double akp = A[(size_t)k * n + p], akq = A[(size_t)k * n + q];
                    A[(size_t)k * n + p] = c * akp - s * akq;
                    A[(size_t)k * n + q] = s * akp + c * akq;
                }
                for (int k = 0; k < n; k++) {   /* rows p, q */
                    double apk = A[(size_t)p * n + k], aqk = A[(size_t)q * n + k];
                    A[(size_t)p * n + k] = c * apk - s * aqk;
                    A[(size_t)q * n + k] = s * apk + c * aqk;
                }
                for (int k = 0; k < n; k++) {
                    double vkp = V[(size_t)k * n + p], vkq = V[(size_t)k * n + q];
                    V[(size_t)k * n + p] = c * vkp - s * vkq;
                    V[(size_t)k * n + q] = s * vkp + c * vkq;
                }
            }
    }
    /* sort descending (selection sort on columns) */
    for (int i = 0; i < n; i++) w[i] = A[(size_t)i * n + i];
    for (int i = 0; i < n; i++) {
        int best = i;
        for (int j = i + 1; j < n; j++) if (w[j] > w[best]) best = j;
        if (best == i) continue;
        double t = w[i]; w[i] = w[best]; w[best] = t;
        for (int k = 0; k < n; k++) {
            double v = V[(size_t)k * n + i];
            V[(size_t)k * n + i] = V[(size_t)k * n + best];
            V[(size_t)k * n + best] = v;
        }
    }
}

void cx_gemm_nn(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                float beta, float *C, int ldc)
{
    scdb_k_gemm_cpu(0, 0, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}
