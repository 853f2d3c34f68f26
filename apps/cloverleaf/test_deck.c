/* test_deck.c: the deck reader on the shipped decks and on broken ones,
 * the PNG writer, the triad bandwidth probe and the roofline probe.
 *
 *   test_deck DECK_DIR
 *
 * Exits 0 when every check passes, else 1 after saying what failed. */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "clover.h"
#include "roofline.h"
#include "traffic.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;

#define CHECK(cond, ...)                                                                                         \
    do {                                                                                                         \
        if (!(cond)) {                                                                                           \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                     \
            fprintf(stderr, __VA_ARGS__);                                                                        \
            fputc('\n', stderr);                                                                                 \
            failures++;                                                                                          \
        }                                                                                                        \
    } while (0)

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

static int near(double a, double b) { return fabs(a - b) <= 1e-12 * (fabs(a) + fabs(b) + 1.0); }

/* ---- the shipped decks ----------------------------------------------- */

static void check_known(const char *file, const clover_deck *d)
{
    if (strcmp(file, "clover_tp1.in") == 0) {
        CHECK(d->x_cells == 10 && d->y_cells == 2, "%s: mesh %dx%d", file, d->x_cells, d->y_cells);
        CHECK(d->nstates == 2, "%s: %d states", file, d->nstates);
        CHECK(near(d->end_time, 3.0), "%s: end_time %g", file, d->end_time);
        CHECK(d->test_problem == 1, "%s: test_problem %d", file, d->test_problem);
        CHECK(near(d->dtinit, 0.04) && near(d->dtmax, 0.04) && near(d->dtrise, 1.5), "%s: timestep settings", file);
        CHECK(near(d->xmax, 10.0) && near(d->ymax, 2.0), "%s: extent %g x %g", file, d->xmax, d->ymax);
    } else if (strcmp(file, "clover_bm_short.in") == 0) {
        CHECK(d->x_cells == 960 && d->y_cells == 960, "%s: mesh %dx%d", file, d->x_cells, d->y_cells);
        CHECK(d->end_step == 87, "%s: end_step %d", file, d->end_step);
        CHECK(d->test_problem == 2, "%s: test_problem %d", file, d->test_problem);
        CHECK(near(d->end_time, 10.0), "%s: end_time %g (the default when only end_step is given)", file,
              d->end_time);
        CHECK(!d->profiler_on, "%s: profiler on", file);
    } else if (strcmp(file, "clover_bm16_very_short.in") == 0) {
        CHECK(d->x_cells == 3840 && d->y_cells == 3840, "%s: mesh %dx%d", file, d->x_cells, d->y_cells);
        CHECK(near(d->state[0].energy, 1.0), "%s: 'energy 1.0' read as %g", file, d->state[0].energy);
        CHECK(near(d->state[0].density, 0.2), "%s: state 1 density %g", file, d->state[0].density);
        CHECK(d->profiler_on, "%s: profiler_on not set", file);
        CHECK(d->end_step == 8 && d->test_problem == 168, "%s: end_step %d test_problem %d", file, d->end_step,
              d->test_problem);
    }
}

static void check_common(const char *file, const clover_deck *d)
{
    const clover_state *s2 = &d->state[1];
    double dx = (d->xmax - d->xmin) / d->x_cells;
    CHECK(d->nstates == 2, "%s: %d states", file, d->nstates);
    CHECK(d->state[0].defined && d->state[1].defined, "%s: states not marked defined", file);
    CHECK(d->state[0].geometry == 0, "%s: state 1 has a geometry", file);
    CHECK(s2->geometry == CLOVER_GEOM_RECTANGLE, "%s: state 2 geometry %d", file, s2->geometry);
    CHECK(near(s2->density, 1.0) && near(s2->energy, 2.5), "%s: state 2 density %g energy %g", file, s2->density,
          s2->energy);
    /* the edges come in a hundredth of a cell, as the reference reader does */
    {
        int qa = strcmp(file, "clover_qa.in") == 0;
        double x0 = qa ? -30.0 : 0.0, x1 = qa ? 30.0 : 5.0, y0 = qa ? -30.0 : 0.0, y1 = qa ? 30.0 : 2.0;
        double dy = (d->ymax - d->ymin) / d->y_cells;
        CHECK(near(s2->xmin, x0 + dx / 100.0) && near(s2->xmax, x1 - dx / 100.0) && near(s2->ymin, y0 + dy / 100.0) &&
                  near(s2->ymax, y1 - dy / 100.0),
              "%s: state 2 extent %.17g %.17g %.17g %.17g", file, s2->xmin, s2->xmax, s2->ymin, s2->ymax);
    }
    CHECK(near(d->dtmin, 1e-7) && near(d->dtc_safe, 0.7) && near(d->dtu_safe, 0.5) && near(d->dtv_safe, 0.5) &&
              near(d->dtdiv_safe, 0.7),
          "%s: default safety factors", file);
    CHECK(d->summary_frequency == 10, "%s: summary_frequency %d", file, d->summary_frequency);
}

static void shipped_decks(const char *dir)
{
    DIR *dd = opendir(dir);
    struct dirent *e;
    int n = 0, seen = 0;
    if (dd == NULL) {
        CHECK(dd != NULL, "cannot open %s", dir);
        return;
    }
    while ((e = readdir(dd)) != NULL) {
        char path[4096], err[512];
        clover_deck d;
        if (!ends_with(e->d_name, ".in"))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        memset(&d, 0xA5, sizeof d);
        if (clover_deck_load(path, &d, err, sizeof err) != 0) {
            CHECK(0, "%s: %s", e->d_name, err);
            continue;
        }
        n++;
        check_common(e->d_name, &d);
        check_known(e->d_name, &d);
        if (!strcmp(e->d_name, "clover_tp1.in") || !strcmp(e->d_name, "clover_bm_short.in") ||
            !strcmp(e->d_name, "clover_bm16_very_short.in"))
            seen++;
    }
    closedir(dd);
    CHECK(n >= 3, "only %d decks in %s", n, dir);
    CHECK(seen == 3, "of clover_tp1, clover_bm_short, clover_bm16_very_short only %d found in %s", seen, dir);
    printf("shipped decks: %d parsed\n", n);
}

/* ---- broken decks ------------------------------------------------------ */

#define GOOD_MESH " x_cells=10\n y_cells=10\n xmax=10.0\n ymax=10.0\n"

struct bad {
    const char *what;
    const char *text;
    const char *line;    /* ":N:" expected in the message */
    const char *keyword; /* expected in the message */
};

static const struct bad bad_decks[] = {
    { "state 3 without state 2",
      "*clover\n state 1 density=1 energy=1\n state 3 density=1 energy=2 geometry=rectangle xmin=0 xmax=1 ymin=0 "
      "ymax=1\n" GOOD_MESH " end_time=1\n*endclover\n",
      ":3:", "'state'" },
    { "state 2 before state 1",
      "*clover\n state 2 density=1 energy=2 geometry=circle xmin=0 ymin=0 radius=1\n state 1 density=1 energy=1\n"
      GOOD_MESH " end_time=1\n*endclover\n",
      ":2:", "'state'" },
    { "state 0", "*clover\n state 0 density=1 energy=1\n" GOOD_MESH " end_time=1\n*endclover\n", ":2:", "'state'" },
    { "state defined twice",
      "*clover\n state 1 density=1 energy=1\n state 1 density=1 energy=1\n" GOOD_MESH " end_time=1\n*endclover\n", ":3:",
      "'state'" },
    { "missing mesh size",
      "*clover\n state 1 density=1 energy=1\n x_cells=10\n end_time=1\n*endclover\n", ":1:", "'y_cells'" },
    { "negative end time",
      "*clover\n state 1 density=1 energy=1\n" GOOD_MESH "\n end_time=-1.0\n*endclover\n", ":8:", "'end_time'" },
    { "negative end step", "*clover\n state 1 density=1 energy=1\n" GOOD_MESH " end_step -5\n*endclover\n", ":7:",
      "'end_step'" },
    { "no end", "*clover\n state 1 density=1 energy=1\n" GOOD_MESH "*endclover\n", ":1:", "'end_time'" },
    { "a non-number",
      "*clover\n state 1 density=1 energy=1\n\n x_cells=ten\n y_cells=10\n end_time=1\n*endclover\n", ":4:",
      "'x_cells': not a number: 'ten'" },
    { "a non-number in a state", "*clover\n state 1 density=1 energy=lots\n" GOOD_MESH " end_time=1\n*endclover\n",
      ":2:", "'energy'" },
    { "unknown geometry",
      "*clover\n state 1 density=1 energy=1\n state 2 density=1 energy=2 geometry=triangle xmin=0 ymin=0\n" GOOD_MESH
      " end_time=1\n*endclover\n",
      ":3:", "'geometry'" },
    { "missing *clover", "state 1 density=1 energy=1\n" GOOD_MESH " end_time=1\n", ":", "'*clover'" },
    { "missing *endclover", "*clover\n state 1 density=1 energy=1\n" GOOD_MESH " end_time=1\n", ":1:", "'*clover'" },
    { "state without density", "*clover\n state 1 energy=1\n" GOOD_MESH " end_time=1\n*endclover\n", ":2:",
      "density" },
    { "state without energy", "*clover\n state 1 density=1\n" GOOD_MESH " end_time=1\n*endclover\n", ":2:",
      "energy" },
    { "state 2 without geometry",
      "*clover\n state 1 density=1 energy=1\n state 2 density=1 energy=2 xmin=0 xmax=1 ymin=0 ymax=1\n" GOOD_MESH
      " end_time=1\n*endclover\n",
      ":3:", "geometry" },
    { "rectangle without extent",
      "*clover\n state 1 density=1 energy=1\n state 2 density=1 energy=2 geometry=rectangle xmin=0 ymin=0\n" GOOD_MESH
      " end_time=1\n*endclover\n",
      ":3:", "xmax" },
    { "circle without radius",
      "*clover\n state 1 density=1 energy=1\n state 2 density=1 energy=2 geometry=circle xmin=0 ymin=0\n" GOOD_MESH
      " end_time=1\n*endclover\n",
      ":3:", "radius" },
    { "zero cells", "*clover\n state 1 density=1 energy=1\n x_cells=0\n y_cells=10\n end_time=1\n*endclover\n", ":3:",
      "'x_cells'" },
    { "xmax below xmin",
      "*clover\n state 1 density=1 energy=1\n x_cells=10\n y_cells=10\n xmin=5\n xmax=1\n end_time=1\n*endclover\n",
      ":6:", "'xmax'" },
    { "zero timestep",
      "*clover\n state 1 density=1 energy=1\n" GOOD_MESH " initial_timestep=0\n end_time=1\n*endclover\n", ":7:",
      "'initial_timestep'" },
    { "negative timestep_rise",
      "*clover\n state 1 density=1 energy=1\n" GOOD_MESH " timestep_rise -1.5\n end_time=1\n*endclover\n", ":7:",
      "'timestep_rise'" },
    { "value missing at the end of the line",
      "*clover\n state 1 density=1 energy=1\n" GOOD_MESH " end_time\n 3.0\n*endclover\n", ":7:", "'end_time'" },
    { "fractional cells", "*clover\n state 1 density=1 energy=1\n x_cells=10.5\n y_cells=2\n end_time=1\n*endclover\n",
      ":3:", "'x_cells'" },
    { "misspelt keyword", "*clover\n state 1 density=1 energy=1\n" GOOD_MESH " end_tme=1\n*endclover\n", ":7:",
      "'end_tme'" },
    { "stray value", "*clover\n state 1 density=1 energy=1\n" GOOD_MESH " end_time=1 2\n*endclover\n", ":7:", "'2'" },
    { "unmatched block end", "*clover\n state 1 density=1 energy=1\n" GOOD_MESH " end_time=1\n*endfoo\n", ":8:",
      "'*endfoo'" },
    { "empty", "", ":", "'*clover'" },
};

static void broken_decks(void)
{
    size_t i;
    for (i = 0; i < sizeof bad_decks / sizeof bad_decks[0]; i++) {
        const struct bad *b = &bad_decks[i];
        char err[512] = "untouched";
        clover_deck d;
        int rc = clover_deck_parse(b->text, "clover_bad.in", &d, err, sizeof err);
        CHECK(rc != 0, "%s: accepted", b->what);
        if (rc == 0)
            continue;
        CHECK(strncmp(err, "clover_bad.in:", 14) == 0, "%s: message does not start with the name: %s", b->what, err);
        CHECK(strstr(err, b->line) != NULL, "%s: message does not name line '%s': %s", b->what, b->line, err);
        CHECK(strstr(err, b->keyword) != NULL, "%s: message does not name '%s': %s", b->what, b->keyword, err);
        printf("  bad deck (%s): %s\n", b->what, err);
    }
    /* a short error buffer is cut, not overrun; none at all is fine */
    {
        char small[8];
        clover_deck d;
        CHECK(clover_deck_parse("nothing", "clover_bad.in", &d, small, sizeof small) != 0, "accepted 'nothing'");
        CHECK(strlen(small) < sizeof small, "error buffer overrun");
        CHECK(clover_deck_parse("nothing", NULL, &d, NULL, 0) != 0, "accepted 'nothing' with no error buffer");
    }
    {
        char err[256];
        clover_deck d;
        CHECK(clover_deck_load("/nonexistent/clover.in", &d, err, sizeof err) != 0, "loaded a missing file");
        CHECK(strstr(err, "/nonexistent/clover.in") != NULL, "missing file not named: %s", err);
    }
}

/* ---- good decks in other spellings ---------------------------------------- */

static void spellings(void)
{
    static const char text[] =
        "! a comment before the block\n"
        "*CLOVER\n"
        " STATE 1 Density 0.5, Energy 2 ; comment\n"
        " state 2 density=1d0 energy=2.5e0 geometry=Circle xmin=5 ymin=5 radius=2.0 xvel=0.25 yvel=-1\n"
        " state 3 density=3 energy=4 geometry point xmin 1 ymin 1\n"
        " x_cells 20 y_cells=30 xmin=-1 xmax=1 \\\n"
        "   ymin=-2 ymax=2\n"
        " *other\n x_cells=999\n *endother\n"
        " end_step 100 use_c_kernels tiles_per_chunk 4 summary_frequency 0 visit_frequency=5\n"
        " profiler_on off\n"
        " some_unknown_setting 12 fast\n"
        "*ENDCLOVER\n"
        "x_cells=7\n";
    char err[512];
    clover_deck d;
    int rc = clover_deck_parse(text, "spellings.in", &d, err, sizeof err);
    CHECK(rc == 0, "spellings deck rejected: %s", err);
    if (rc != 0)
        return;
    CHECK(d.nstates == 3, "%d states", d.nstates);
    CHECK(near(d.state[0].density, 0.5) && near(d.state[0].energy, 2.0), "state 1 %g %g", d.state[0].density,
          d.state[0].energy);
    CHECK(d.state[1].geometry == CLOVER_GEOM_CIRCLE && near(d.state[1].radius, 2.0) && near(d.state[1].yvel, -1.0) &&
              near(d.state[1].density, 1.0),
          "state 2");
    CHECK(d.state[2].geometry == CLOVER_GEOM_POINT, "state 3 geometry %d", d.state[2].geometry);
    CHECK(d.x_cells == 20 && d.y_cells == 30, "mesh %dx%d", d.x_cells, d.y_cells);
    CHECK(near(d.ymin, -2.0) && near(d.ymax, 2.0), "continued line: y %g..%g", d.ymin, d.ymax);
    CHECK(d.end_step == 100 && near(d.end_time, 10.0), "end_step %d end_time %g", d.end_step, d.end_time);
    CHECK(d.summary_frequency == 0 && d.visit_frequency == 5, "frequencies %d %d", d.summary_frequency,
          d.visit_frequency);
    CHECK(!d.profiler_on, "profiler_on off read as on");

    /* only end_time: end_step is very large */
    rc = clover_deck_parse("*clover\nstate 1 density 1 energy 1\nx_cells 4 y_cells 4\nend_time 2\n*endclover\n", "t.in",
                           &d, err, sizeof err);
    CHECK(rc == 0 && d.end_step > 1000000 && near(d.end_time, 2.0), "end_time only: %s", err);
}

/* ---- two parses at once --------------------------------------------------- */

static void *parse_many(void *arg)
{
    const char *dir = arg;
    char path[4096], err[512];
    int i, bad = 0;
    snprintf(path, sizeof path, "%s/clover_tp1.in", dir);
    for (i = 0; i < 200; i++) {
        clover_deck d;
        if (clover_deck_load(path, &d, err, sizeof err) != 0 || d.x_cells != 10)
            bad++;
        if (clover_deck_parse(bad_decks[i % 8].text, "x.in", &d, err, sizeof err) == 0)
            bad++;
    }
    return bad ? (void *)1 : NULL;
}

static void concurrent(const char *dir)
{
    pthread_t t[4];
    int i, n = 0;
    for (i = 0; i < 4; i++)
        if (pthread_create(&t[i], NULL, parse_many, (void *)dir) == 0)
            n++;
        else
            break;
    for (i = 0; i < n; i++) {
        void *r;
        pthread_join(t[i], &r);
        CHECK(r == NULL, "thread %d: a parse went wrong", i);
    }
}

/* ---- picture and bandwidth ------------------------------------------------ */

static void picture(void)
{
    enum { W = 37, H = 23, PITCH = 41 };
    static double field[H * PITCH];
    char path[] = "/tmp/clover_test_XXXXXX";
    unsigned char head[33];
    FILE *f;
    long size;
    int x, y, fd;
    /* rows are W*3+1 bytes: 112 a row, 23 rows, in one stored block */
    const long expect = 8 + (12 + 13) + (12 + 2 + 5 + H * (3 * W + 1) + 4) + 12;

    for (y = 0; y < H; y++)
        for (x = 0; x < PITCH; x++)
            field[y * PITCH + x] = x < W ? sin(0.3 * x) + 0.1 * y : 1e300; /* padding is not drawn */
    fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0)
        return;
    close(fd);
    CHECK(clover_write_png(path, field, W, H, PITCH) == 0, "clover_write_png failed");
    f = fopen(path, "rb");
    CHECK(f != NULL, "cannot reopen %s", path);
    if (f) {
        CHECK(fread(head, 1, sizeof head, f) == sizeof head, "short file");
        CHECK(memcmp(head, "\x89PNG\r\n\x1a\n", 8) == 0, "no PNG signature");
        CHECK(memcmp(head + 12, "IHDR", 4) == 0, "no IHDR first");
        CHECK(head[16] == 0 && head[19] == W && head[23] == H && head[24] == 8 && head[25] == 2, "IHDR fields");
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        CHECK(size == expect, "size %ld, expected %ld", size, expect);
        fclose(f);
    }
    unlink(path);
    CHECK(clover_write_png(path, NULL, W, H, PITCH) != 0, "wrote a NULL field");
    CHECK(clover_write_png(path, field, 0, H, PITCH) != 0, "wrote a zero-width field");
    CHECK(clover_write_png("/nonexistent/dir/x.png", field, W, H, PITCH) != 0, "wrote into a missing folder");
}

static void bandwidth(void)
{
    double bw = clover_triad_bw(100000, 2, 3);
    CHECK(bw > 0.0 && isfinite(bw), "triad bandwidth %g", bw);
    CHECK(clover_triad_bw(3, 8, 1) > 0.0, "more threads than elements");
    printf("triad: %.2f GB/s (n = 100000, 2 threads)\n", bw / 1e9);
}

/* The roofline probe (roofline.h) on a small mesh: every kernel of the
 * step timed in both settings, the bytes traffic.c's, the bound between
 * the in-cache floor and nothing. */
static void roofline(void)
{
    static const char deck_text[] = "*clover\n state 1 density=0.2 energy=1.0\n"
                                    " state 2 density=1.0 energy=2.5 geometry=rectangle xmin=0.0 xmax=5.0 ymin=0.0 ymax=2.0\n"
                                    " x_cells=64\n y_cells=48\n xmin=0.0\n ymin=0.0\n xmax=10.0\n ymax=10.0\n"
                                    " initial_timestep=0.04\n timestep_rise=1.5\n max_timestep=0.04\n end_step=5\n*endclover\n";
    clover_deck d;
    char err[256];
    CHECK(clover_deck_parse(deck_text, "roofline", &d, err, sizeof err) == 0, "roofline deck: %s", err);
    clover_roofline r;
    CHECK(clover_roofline_measure(&d, 2, &r) == 0, "roofline measure failed");
    CHECK(r.threads == 2 && r.cache_nx == 64 && r.cache_ny == 32, "chunks %d threads, cache %d x %d", r.threads,
          r.cache_nx, r.cache_ny);
    CHECK(r.stream_nx * r.stream_ny * 2 == 64 * 48, "streaming chunk %d x %d", r.stream_nx, r.stream_ny);
    CHECK(fabs(r.bytes - clover_traffic_step_bytes()) < 1e-9, "bytes %g, traffic.c %g", r.bytes,
          clover_traffic_step_bytes());
    for (int k = 0; k < r.nrows; k++)
        CHECK(r.row[k].cache_ns > 0 && r.row[k].stream_ns > 0 && isfinite(r.row[k].cache_ns) &&
                  isfinite(r.row[k].stream_ns),
              "%s: cache %g ns, stream %g ns", r.row[k].kernel, r.row[k].cache_ns, r.row[k].stream_ns);
    double triad = 1e10;
    double bound = clover_roofline_bound_bw(&r, triad);
    CHECK(bound > 0 && bound <= triad * (1 + 1e-9) && bound <= r.bytes * 2 / r.cache_ns * 1e9 * (1 + 1e-9),
          "bound %g B/s against triad %g and the in-cache floor %g", bound, triad, r.bytes * 2 / r.cache_ns * 1e9);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s DECK_DIR\n", argv[0]);
        return 2;
    }
    shipped_decks(argv[1]);
    broken_decks();
    spellings();
    concurrent(argv[1]);
    picture();
    bandwidth();
    roofline();
    if (failures) {
        fprintf(stderr, "test_deck: %d checks failed\n", failures);
        return 1;
    }
    printf("test_deck: all checks passed\n");
    return 0;
}
