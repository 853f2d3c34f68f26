/* Time-step control, the field summary table and the verification of a
 * test problem's result: the rules of the reference code's timestep and
 * field_summary routines, with nothing of the kernels. */
#include "clover.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- the next step's dt ------------------------------------------------- */

/* dt_chunks is the smallest stable step of all chunks.  The step may grow
 * by at most dtrise over the last one and never exceed dtmax; a step below
 * dtmin ends the run.  The reference does not shorten the last step to
 * land on end_time: the run stops at the first step whose end is past it
 * (time + 1e-16 > end_time), so neither is done here. */
int clover_next_dt(const clover_deck *d, clover_clock *clk, double dt_chunks)
{
    double dt = dt_chunks;
    double grown = clk->dtold * d->dtrise;
    if (grown < dt)
        dt = grown;
    if (d->dtmax < dt)
        dt = d->dtmax;
    clk->dt = dt;
    if (dt < d->dtmin) {
        fprintf(stderr,
                "clover: step %d at time %.9g: time step %.6e is below the smallest allowed (dtmin %.6e)\n",
                clk->step, clk->time, dt, d->dtmin);
        return -1;
    }
    clk->dtold = dt;
    return 0;
}

/* ---- the field summary table ------------------------------------------- */

/* A number as Fortran's Ew.4 edit descriptor writes it: 0.dddd, then the
 * exponent as E+xx (or +xxx without the E when it needs three digits),
 * right-justified in w characters. */
static void fortran_e(char *buf, size_t len, double x, int w)
{
    char body[48];
    if (isnan(x)) {
        snprintf(body, sizeof body, "NaN");
    } else if (isinf(x)) {
        snprintf(body, sizeof body, "%sInfinity", x < 0 ? "-" : "");
    } else if (x == 0.0) {
        snprintf(body, sizeof body, "%s0.0000E+00", signbit(x) ? "-" : "");
    } else {
        /* d.ddde+XX has the same four rounded digits as 0.ddddE+(XX+1) */
        char sci[40];
        snprintf(sci, sizeof sci, "%.3e", fabs(x));
        int e = 0;
        const char *ep = strchr(sci, 'e');
        if (ep)
            sscanf(ep + 1, "%d", &e);
        e += 1;
        char digits[5] = {sci[0], sci[2], sci[3], sci[4], '\0'};
        int ae = e < 0 ? -e : e;
        if (ae <= 99)
            snprintf(body, sizeof body, "%s0.%sE%c%02d", x < 0 ? "-" : "", digits, e < 0 ? '-' : '+', ae);
        else
            snprintf(body, sizeof body, "%s0.%s%c%03d", x < 0 ? "-" : "", digits, e < 0 ? '-' : '+', ae);
    }
    snprintf(buf, len, "%*s", w, body);
}

static const char *const summary_heads[] = {"Time",           "Volume",         "Mass",        "Density",
                                            "Pressure",       "Internal Energy", "Kinetic Energy",
                                            "Total Energy"};

/* The header's text: a blank line, then the column titles and a newline. */
int clover_format_summary_header(char *buf, size_t len)
{
    const char *const *h = summary_heads;
    return snprintf(buf, len, "\n%13s%16s%16s%16s%16s%16s%16s%16s%16s\n", "", h[0], h[1], h[2], h[3], h[4], h[5],
                    h[6], h[7]);
}

/* One row's text, newline included. */
int clover_format_summary(char *buf, size_t len, int step, double time, const double sums[CS_N])
{
    const double vol = sums[CS_VOL], mass = sums[CS_MASS], ie = sums[CS_IE], ke = sums[CS_KE];
    const double cols[8] = {time, vol, mass, mass / vol, sums[CS_PRESS] / vol, ie, ke, ie + ke};
    char cells[8][64];
    for (int i = 0; i < 8; i++)
        fortran_e(cells[i], sizeof cells[i], cols[i], 16);
    return snprintf(buf, len, " step:%7d%s%s%s%s%s%s%s%s\n", step, cells[0], cells[1], cells[2], cells[3],
                    cells[4], cells[5], cells[6], cells[7]);
}

void clover_print_summary_header(FILE *out)
{
    if (!out)
        return;
    char buf[256];
    if (clover_format_summary_header(buf, sizeof buf) >= 0)
        fputs(buf, out);
}

void clover_print_summary(FILE *out, int step, double time, const double sums[CS_N])
{
    if (!out)
        return;
    char buf[640];
    if (clover_format_summary(buf, sizeof buf, step, time, sums) >= 0)
        fputs(buf, out);
}

/* ---- verification ------------------------------------------------------ */

double clover_reference_ke(int test_problem)
{
    switch (test_problem) {
    case 1: return 1.82280367310258;
    case 2: return 1.19316898756307;
    case 3: return 2.58984003503994;
    case 4: return 0.307475452287895;
    case 5: return 4.85350315783719;
    case 168: return 2.465082e-02;
    case 287: return 6.062609e-01;
    case 487: return 6.088288e-01;
    default: return 0.0;
    }
}

int clover_format_verify(char *buf, size_t len, const clover_deck *d, double ke)
{
    if (len)
        buf[0] = '\0';
    const double ref = clover_reference_ke(d->test_problem);
    if (ref == 0.0) {
        if (d->test_problem != 0)
            snprintf(buf, len, "\n Test problem %d: no reference kinetic energy is known; not verified\n",
                     d->test_problem);
        return -1;
    }
    const double diff = fabs(100.0 * (ke / ref) - 100.0);
    const int pass = diff < 0.001; /* a NaN fails */
    snprintf(buf, len,
             "\n Test problem %d: kinetic energy %.15e against the reference %.15e differs by %.7e %%"
             " (limit 0.001 %%): %s\n",
             d->test_problem, ke, ref, diff, pass ? "PASS" : "FAIL");
    return pass;
}

int clover_verify(FILE *out, const clover_deck *d, double ke)
{
    char buf[512];
    int v = clover_format_verify(buf, sizeof buf, d, ke);
    if (out)
        fputs(buf, out);
    return v;
}
