/* png.c: a field as a colour PNG, written without zlib.
 *
 * The picture is 8-bit RGB.  Its pixel data is a zlib stream of stored
 * (uncompressed) deflate blocks, each block in an IDAT chunk of its own,
 * so the whole image never has to be held in memory: scanlines are built
 * into one block-sized buffer and sent out as it fills. */
#include "clover.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STORED_MAX 65535u /* most bytes a stored deflate block holds */

typedef struct png_out {
    FILE *f;
    uint32_t crc_table[256];
    uint32_t adler_a, adler_b;
    int failed;
} png_out;

static void crc_init(png_out *o)
{
    uint32_t n;
    for (n = 0; n < 256; n++) {
        uint32_t c = n;
        int k;
        for (k = 0; k < 8; k++)
            c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        o->crc_table[n] = c;
    }
}

static uint32_t crc_add(const png_out *o, uint32_t crc, const unsigned char *p, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        crc = o->crc_table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
    return crc;
}

static void adler_add(png_out *o, const unsigned char *p, size_t n)
{
    /* 5552 is the most bytes before the sums could pass 2^32 */
    while (n > 0) {
        size_t m = n < 5552 ? n : 5552, i;
        for (i = 0; i < m; i++) {
            o->adler_a += p[i];
            o->adler_b += o->adler_a;
        }
        o->adler_a %= 65521u;
        o->adler_b %= 65521u;
        p += m;
        n -= m;
    }
}

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void put_bytes(png_out *o, const void *p, size_t n)
{
    if (!o->failed && n > 0 && fwrite(p, 1, n, o->f) != n)
        o->failed = 1;
}

/* A chunk: its type, then its data in two parts (either may be empty). */
static void put_chunk(png_out *o, const char type[4], const unsigned char *a, size_t an, const unsigned char *b,
                      size_t bn)
{
    unsigned char head[8], tail[4];
    uint32_t crc = 0xFFFFFFFFu;
    put32(head, (uint32_t)(an + bn));
    memcpy(head + 4, type, 4);
    crc = crc_add(o, crc, head + 4, 4);
    crc = crc_add(o, crc, a, an);
    crc = crc_add(o, crc, b, bn);
    put32(tail, crc ^ 0xFFFFFFFFu);
    put_bytes(o, head, 8);
    put_bytes(o, a, an);
    put_bytes(o, b, bn);
    put_bytes(o, tail, 4);
}

/* One IDAT chunk holding one stored block of n bytes; the first carries
 * the zlib header, the last the Adler-32 of everything (data has room
 * for its four bytes). */
static void put_block(png_out *o, unsigned char *data, size_t n, int first, int last)
{
    unsigned char pre[2 + 5];
    size_t pn = 0;
    if (first) {
        pre[pn++] = 0x78; /* deflate, 32 KiB window */
        pre[pn++] = 0x01; /* no dictionary, fastest; 0x7801 is a multiple of 31 */
    }
    pre[pn++] = (unsigned char)(last ? 1 : 0); /* BFINAL, BTYPE 00 (stored), padded to the byte */
    pre[pn++] = (unsigned char)(n & 0xFFu);
    pre[pn++] = (unsigned char)(n >> 8);
    pre[pn++] = (unsigned char)(~n & 0xFFu);
    pre[pn++] = (unsigned char)((~n >> 8) & 0xFFu);
    adler_add(o, data, n);
    if (last) {
        /* the checksum follows the data in the same chunk; data has room */
        put32(data + n, (o->adler_b << 16) | o->adler_a);
        n += 4;
    }
    put_chunk(o, "IDAT", pre, pn, data, n);
}

/* Dark blue through teal and green to yellow, roughly even in lightness. */
static void colour(double t, unsigned char rgb[3])
{
    static const unsigned char ramp[][3] = {
        { 30, 20, 90 }, { 40, 70, 150 }, { 30, 125, 150 }, { 50, 170, 120 }, { 150, 205, 70 }, { 250, 230, 40 },
    };
    const int last = (int)(sizeof ramp / sizeof ramp[0]) - 1;
    double x;
    int i, c;
    if (!(t >= 0.0))
        t = 0.0;
    if (t > 1.0)
        t = 1.0;
    x = t * last;
    i = (int)x;
    if (i >= last)
        i = last - 1;
    x -= i;
    for (c = 0; c < 3; c++)
        rgb[c] = (unsigned char)lrint(ramp[i][c] + (ramp[i + 1][c] - ramp[i][c]) * x);
}

int clover_write_png(const char *path, const double *field, int w, int h, size_t pitch)
{
    png_out o;
    unsigned char ihdr[13];
    unsigned char *buf;
    size_t row_bytes, total, left, fill = 0;
    double lo = INFINITY, hi = -INFINITY, scale;
    int x, y, first = 1, saved;

    if (path == NULL || field == NULL || w <= 0 || h <= 0 || pitch < (size_t)w) {
        errno = EINVAL;
        return -1;
    }
    /* a scanline is a filter byte and three bytes a pixel */
    if ((size_t)w > (SIZE_MAX - 1) / 3 || (size_t)w > 0x7FFFFFFFu || (size_t)h > 0x7FFFFFFFu) {
        errno = EINVAL;
        return -1;
    }
    row_bytes = 1 + 3 * (size_t)w;
    if (row_bytes > SIZE_MAX / (size_t)h) {
        errno = EINVAL;
        return -1;
    }
    total = row_bytes * (size_t)h;

    for (y = 0; y < h; y++)
        for (x = 0; x < w; x++) {
            double v = field[(size_t)y * pitch + (size_t)x];
            if (isfinite(v)) {
                if (v < lo)
                    lo = v;
                if (v > hi)
                    hi = v;
            }
        }
    scale = (hi > lo) ? 1.0 / (hi - lo) : 0.0;
    if (!(hi >= lo))
        lo = 0.0; /* nothing finite */

    buf = malloc(STORED_MAX + 4);
    if (buf == NULL) {
        errno = ENOMEM;
        return -1;
    }
    memset(&o, 0, sizeof o);
    o.adler_a = 1;
    crc_init(&o);
    o.f = fopen(path, "wb");
    if (o.f == NULL) {
        saved = errno;
        free(buf);
        errno = saved;
        return -1;
    }

    put_bytes(&o, "\x89PNG\r\n\x1a\n", 8);
    put32(ihdr, (uint32_t)w);
    put32(ihdr + 4, (uint32_t)h);
    ihdr[8] = 8;  /* bits a sample */
    ihdr[9] = 2;  /* RGB */
    ihdr[10] = 0; /* deflate */
    ihdr[11] = 0; /* adaptive filters (each row says none) */
    ihdr[12] = 0; /* not interlaced */
    put_chunk(&o, "IHDR", ihdr, sizeof ihdr, NULL, 0);

    /* rows top first: the field's last row is the picture's first */
    left = total;
    for (y = h - 1; y >= 0 && !o.failed; y--) {
        const double *row = field + (size_t)y * pitch;
        for (x = -1; x < w; x++) {
            unsigned char px[3];
            size_t n = 1, k;
            if (x < 0) {
                px[0] = 0; /* filter: none */
            } else {
                double v = row[x];
                if (isnan(v)) {
                    px[0] = px[1] = px[2] = 0;
                } else {
                    double t = isinf(v) ? (v > 0 ? 1.0 : 0.0) : (v - lo) * scale;
                    colour(t, px);
                }
                n = 3;
            }
            for (k = 0; k < n; k++) {
                buf[fill++] = px[k];
                left--;
                if (fill == STORED_MAX || left == 0) {
                    put_block(&o, buf, fill, first, left == 0);
                    first = 0;
                    fill = 0;
                }
            }
        }
    }
    put_chunk(&o, "IEND", NULL, 0, NULL, 0);
    free(buf);

    if (o.failed) {
        saved = errno ? errno : EIO;
        fclose(o.f);
        unlink(path);
        errno = saved;
        return -1;
    }
    if (fclose(o.f) != 0) {
        saved = errno;
        unlink(path);
        errno = saved;
        return -1;
    }
    return 0;
}
