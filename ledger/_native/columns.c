/* The template reader of line capture, compiled: one pass over a block of log lines that finds the lines of
 * one shape and reads their step and metrics.
 *
 * The pure-Python reader (ledger/ingest/formats/columns.py: `read`) is the definition and the fallback; this
 * file gives the same answer faster, and says "I cannot tell" (returns -1) rather than guess: the caller then
 * runs the Python reader on the block. For each line of the block (each ends with '\n'):
 *
 *   1. shape: does the whole line match  piece0 NUM piece1 NUM ... pieceN  where a run of spaces in a piece
 *      matches a run of one or more spaces, other bytes match themselves, and NUM is the number language
 *      of columns.NUM:  [-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf
 *      (match_greedy, then match_from);
 *   2. runs: the line cut at runs of number characters, as columns.runs cuts it (count_runs); a line with
 *      another count of runs than the shape's is not read;
 *   3. values: the step run, commas removed, must be digits (else the line is not read), read as int64
 *      (overflow: -1); each metric run, commas removed, read as a double if it is
 *      [+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)? (text Arrow's cast accepts; anything else: -1).
 *
 * That is the reading of columns.py's number runs (`_numbers`); its other reading, of whole words
 * (`_words`), gives the same lines except one with `nan` or `inf` where a number was, which the runs leave
 * to the formats' parsers (they read it the same).
 *
 * Work and memory are bounded whatever the input: the shape match backtracks at most MATCH_BUDGET times per
 * line (past that: -1), a number of more than MAX_NUMBER characters gives -1, and nothing is allocated per
 * line. The interpreter lock is released for the whole pass.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MATCH_BUDGET 4096 /* shape-match attempts per line before giving up */
#define MAX_ENDS 64       /* places a number starting at one place may end; more: give up */
#define MAX_NUMBER 512    /* characters of a number read as a value */

typedef struct {
    const unsigned char *bytes;
    Py_ssize_t size;
} Piece;

typedef struct {
    const Piece *pieces;
    Py_ssize_t npieces;
    const unsigned char *line; /* the line, without its newline */
    Py_ssize_t end;            /* its length; line[end] is the newline */
    int budget;                /* attempts left; below 0: undecided */
} Matcher;

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

/* Where the literal `piece` ends when it starts at `pos` of the line; -1 when it does not match there.
 * A run of spaces in the piece takes the whole run of spaces of the line (what follows a piece is a number or
 * the line's end, neither of which starts with a space: taking them all is the only way to match). */
static Py_ssize_t match_literal(const Piece *piece, const unsigned char *line, Py_ssize_t pos, Py_ssize_t end)
{
    const unsigned char *p = piece->bytes, *stop = p + piece->size;
    while (p < stop) {
        if (*p != ' ') {
            if (pos >= end || line[pos] != *p)
                return -1;
            pos++;
            p++;
            continue;
        }
        while (p < stop && *p == ' ')
            p++;
        if (pos >= end || line[pos] != ' ')
            return -1;
        while (pos < end && line[pos] == ' ')
            pos++;
    }
    return pos;
}

/* Length of the run of digits at `pos` (stops at `end`). */
static Py_ssize_t digits_at(const unsigned char *line, Py_ssize_t pos, Py_ssize_t end)
{
    Py_ssize_t n = 0;
    while (pos + n < end && is_digit(line[pos + n]))
        n++;
    return n;
}

/* Add the places where the optional exponent after a mantissa ending at `m` may end (m itself first).
 * Returns the new count of places, or -1 past MAX_ENDS. */
static int add_exponents(const unsigned char *line, Py_ssize_t m, Py_ssize_t end, Py_ssize_t *ends, int n)
{
    if (n >= MAX_ENDS)
        return -1;
    ends[n++] = m;
    if (m < end && (line[m] == 'e' || line[m] == 'E')) {
        Py_ssize_t g = m + 1;
        if (g < end && (line[g] == '+' || line[g] == '-'))
            g++;
        Py_ssize_t d = digits_at(line, g, end);
        for (Py_ssize_t j = 1; j <= d; j++) {
            if (n >= MAX_ENDS)
                return -1;
            ends[n++] = g + j;
        }
    }
    return n;
}

/* Every place where a NUM starting at `pos` may end, into `ends`; returns how many (0: no number starts
 * there), -1 when there are more than MAX_ENDS. */
static int number_ends(const unsigned char *line, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t *ends)
{
    int n = 0;
    if (end - pos >= 3 && (memcmp(line + pos, "nan", 3) == 0 || memcmp(line + pos, "inf", 3) == 0))
        ends[n++] = pos + 3;
    Py_ssize_t q = pos;
    if (q < end && (line[q] == '+' || line[q] == '-'))
        q++;
    if (q < end && is_digit(line[q])) { /* \d[\d,]*(\.\d*)? : every prefix of the [\d,]* run may end it */
        Py_ssize_t r = q + 1;
        while (r < end && (is_digit(line[r]) || line[r] == ','))
            r++;
        for (Py_ssize_t m = q + 1; m <= r; m++) {
            if ((n = add_exponents(line, m, end, ends, n)) < 0)
                return -1;
            if (m < end && line[m] == '.') {
                Py_ssize_t d = digits_at(line, m + 1, end);
                for (Py_ssize_t j = 0; j <= d; j++)
                    if ((n = add_exponents(line, m + 1 + j, end, ends, n)) < 0)
                        return -1;
            }
        }
    } else if (q + 1 < end && line[q] == '.' && is_digit(line[q + 1])) { /* \.\d+ */
        Py_ssize_t d = digits_at(line, q + 1, end);
        for (Py_ssize_t j = 1; j <= d; j++)
            if ((n = add_exponents(line, q + 1 + j, end, ends, n)) < 0)
                return -1;
    }
    return n;
}

/* Where the longest NUM starting at `pos` ends; -1 when none starts there. */
static Py_ssize_t longest_number(const unsigned char *line, Py_ssize_t pos, Py_ssize_t end)
{
    Py_ssize_t q = pos, m;
    if (q < end && (line[q] == '+' || line[q] == '-'))
        q++;
    if (q < end && is_digit(line[q])) {
        m = q + 1;
        while (m < end && (is_digit(line[m]) || line[m] == ','))
            m++;
        if (m < end && line[m] == '.')
            m += 1 + digits_at(line, m + 1, end);
    } else if (q + 1 < end && line[q] == '.' && is_digit(line[q + 1])) {
        m = q + 1 + digits_at(line, q + 1, end);
    } else if (end - pos >= 3 && (memcmp(line + pos, "nan", 3) == 0 || memcmp(line + pos, "inf", 3) == 0)) {
        return pos + 3;
    } else {
        return -1;
    }
    if (m < end && (line[m] == 'e' || line[m] == 'E')) {
        Py_ssize_t g = m + 1;
        if (g < end && (line[g] == '+' || line[g] == '-'))
            g++;
        Py_ssize_t d = digits_at(line, g, end);
        if (d)
            m = g + d;
    }
    return m;
}

/* Whether the line matches with every number read longest (the usual case, without backtracking): 1 yes,
 * 0 not that way (match_from then tries every way). */
static int match_greedy(const Matcher *mt)
{
    Py_ssize_t pos = 0;
    for (Py_ssize_t k = 0;; k++) {
        pos = match_literal(&mt->pieces[k], mt->line, pos, mt->end);
        if (pos < 0)
            return 0;
        if (k == mt->npieces - 1)
            return pos == mt->end;
        pos = longest_number(mt->line, pos, mt->end);
        if (pos < 0)
            return 0;
    }
}

/* Whether the pieces from `k` on (each followed by a NUM, the last by the line's end) match from `pos`:
 * 1 yes, 0 no, -1 undecided (the budget ran out or a number has too many places to end). */
static int match_from(Matcher *mt, Py_ssize_t k, Py_ssize_t pos)
{
    pos = match_literal(&mt->pieces[k], mt->line, pos, mt->end);
    if (pos < 0)
        return 0;
    if (k == mt->npieces - 1)
        return pos == mt->end;
    Py_ssize_t longest = longest_number(mt->line, pos, mt->end);
    if (longest < 0)
        return 0; /* no number starts here */
    if (--mt->budget < 0)
        return -1;
    int first = match_from(mt, k + 1, longest); /* the usual reading first, without listing the others */
    if (first != 0)
        return first;
    Py_ssize_t ends[MAX_ENDS];
    int n = number_ends(mt->line, pos, mt->end, ends);
    if (n < 0)
        return -1;
    for (int i = n - 1; i >= 0; i--) { /* the other readings, longest first */
        if (ends[i] == longest)
            continue;
        if (--mt->budget < 0)
            return -1;
        int got = match_from(mt, k + 1, ends[i]);
        if (got != 0)
            return got;
    }
    return 0;
}

/* What a byte may be in a number (columns.runs): always a number character (digits, '.', '+', '-'), one
 * depending on its neighbours (e/E, ','), or none. */
enum { OTHER = 0, ALWAYS = 1, EXPONENT = 2, COMMA = 3 };
static unsigned char classes[256];

static void init_classes(void)
{
    for (int c = '0'; c <= '9'; c++)
        classes[c] = ALWAYS;
    classes['.'] = classes['+'] = classes['-'] = ALWAYS;
    classes['e'] = classes['E'] = EXPONENT;
    classes[','] = COMMA;
}

/* Whether the byte at `i` of the line (line[end] is its newline) is a number character, as columns.runs says:
 * digits, '.', '+', '-'; an e/E between a digit (or point) and a digit (or a signed digit); a comma between
 * two digits. */
static int number_char(const unsigned char *line, Py_ssize_t i, Py_ssize_t end)
{
    switch (classes[line[i]]) {
    case ALWAYS:
        return 1;
    case EXPONENT: {
        if (i == 0 || i + 1 >= end)
            return 0;
        unsigned char before = line[i - 1], after = line[i + 1];
        return (is_digit(before) || before == '.')
               && (is_digit(after) || ((after == '+' || after == '-') && i + 2 < end && is_digit(line[i + 2])));
    }
    case COMMA:
        return i > 0 && i + 1 < end && is_digit(line[i - 1]) && is_digit(line[i + 1]);
    default:
        return 0;
    }
}

/* The runs of number characters of the line that hold a digit in their first three characters; their
 * starts and stops go to `starts`/`stops` (room for `room`). Returns how many runs there are (counting on
 * past `room`, so that a count above it is seen). */
static Py_ssize_t count_runs(const unsigned char *line, Py_ssize_t end, Py_ssize_t *starts, Py_ssize_t *stops,
                             Py_ssize_t room)
{
    Py_ssize_t count = 0, i = 0;
    while (i < end) {
        unsigned char c = classes[line[i]];
        if (c == OTHER || (c != ALWAYS && !number_char(line, i, end))) { /* most bytes: one table look-up */
            i++;
            continue;
        }
        Py_ssize_t a = i++;
        while (i < end) {
            c = classes[line[i]];
            if (c == ALWAYS || (c != OTHER && number_char(line, i, end)))
                i++;
            else
                break;
        }
        Py_ssize_t width = i - a;
        if (is_digit(line[a]) || (width > 1 && is_digit(line[a + 1])) || (width > 2 && is_digit(line[a + 2]))) {
            if (count < room) {
                starts[count] = a;
                stops[count] = i;
            }
            count++;
        }
    }
    return count;
}

/* The step number of a run: commas dropped, digits only (else the line is no step line: -1), fits in int64
 * (else -2: the Python reader refuses the block). 0 when read. */
static int read_step(const unsigned char *s, Py_ssize_t n, int64_t *out)
{
    uint64_t value = 0;
    int any = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] == ',')
            continue;
        if (!is_digit(s[i]))
            return -1;
        any = 1;
    }
    if (!any)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] == ',')
            continue;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (value > (INT64_MAX - d) / 10)
            return -2;
        value = value * 10 + d;
    }
    *out = (int64_t)value;
    return 0;
}

/* Whether `s` (NUL-terminated) is [+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)? : the numbers read as values. */
static int plain_number(const char *s)
{
    if (*s == '+' || *s == '-')
        s++;
    int mantissa = 0;
    while (is_digit((unsigned char)*s)) {
        s++;
        mantissa = 1;
    }
    if (*s == '.') {
        s++;
        while (is_digit((unsigned char)*s)) {
            s++;
            mantissa = 1;
        }
    }
    if (!mantissa)
        return 0;
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-')
            s++;
        if (!is_digit((unsigned char)*s))
            return 0;
        while (is_digit((unsigned char)*s))
            s++;
    }
    return *s == '\0';
}

/* The value of a plain number (plain_number is true of `s`) with at most 15 significant digits and a power of
 * ten within 1e22 of them, exactly as strtod gives it (both operands of the one multiplication or division are
 * exact doubles, so its IEEE rounding is the correctly rounded value: Clinger's fast path). 0 when read, -1
 * when the number needs strtod. */
static int fast_value(const char *s, double *out)
{
    static const double powers[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    int negative = 0, digits = 0, exponent = 0;
    uint64_t mantissa = 0;
    if (*s == '+' || *s == '-')
        negative = *s++ == '-';
    for (; is_digit((unsigned char)*s); s++)
        if (mantissa || *s != '0') { /* leading zeros are no significant digits */
            if (++digits > 15)
                return -1;
            mantissa = mantissa * 10 + (uint64_t)(*s - '0');
        }
    if (*s == '.')
        for (s++; is_digit((unsigned char)*s); s++) {
            exponent--;
            if (mantissa || *s != '0') {
                if (++digits > 15)
                    return -1;
                mantissa = mantissa * 10 + (uint64_t)(*s - '0');
            }
        }
    if (*s == 'e' || *s == 'E') {
        s++;
        int sign = 1, e = 0;
        if (*s == '+' || *s == '-')
            sign = *s++ == '-' ? -1 : 1;
        for (; is_digit((unsigned char)*s); s++)
            if ((e = e * 10 + (*s - '0')) > 10000)
                return -1;
        exponent += sign * e;
    }
    if (exponent < -22 || exponent > 22)
        return -1;
    double value = (double)mantissa; /* exact: below 2^53 */
    value = exponent < 0 ? value / powers[-exponent] : value * powers[exponent];
    *out = negative ? -value : value;
    return 0;
}

/* A metric run as a double: commas dropped, then plain_number and fast_value or strtod. 0 when read, -1
 * otherwise. */
static int read_value(const unsigned char *s, Py_ssize_t n, double *out)
{
    char text[MAX_NUMBER + 1];
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] == ',')
            continue;
        if (k >= MAX_NUMBER)
            return -1;
        text[k++] = (char)s[i];
    }
    text[k] = '\0';
    if (!plain_number(text))
        return -1;
    if (fast_value(text, out) == 0)
        return 0;
    char *stop;
    errno = 0;
    *out = strtod(text, &stop); /* overflow gives +-inf and underflow 0 or a subnormal, as Arrow's cast */
    return *stop == '\0' ? 0 : -1;
}

typedef struct {
    const unsigned char *data;
    Py_ssize_t size;
    const unsigned char *mask; /* NULL: every line; else lines with mask[i] == 0 are skipped */
    Py_ssize_t mask_size;
    const Piece *pieces;
    Py_ssize_t npieces;
    Py_ssize_t count, step;
    const Py_ssize_t *metrics;
    Py_ssize_t nmetrics;
    Py_ssize_t *starts, *stops; /* room for count + 1 runs */
    int64_t *out_lines, *out_steps;
    double *out_values; /* row-major: nmetrics per line read */
    Py_ssize_t room;    /* rows the outputs hold */
} Job;

/* The whole pass (no Python object touched: runs without the interpreter lock). Returns the lines read, or
 * -1 when the Python reader must decide. */
static Py_ssize_t read_block(const Job *job)
{
    Py_ssize_t read = 0, index = 0, pos = 0;
    while (pos < job->size) {
        const unsigned char *line = job->data + pos;
        const unsigned char *nl = memchr(line, '\n', (size_t)(job->size - pos));
        if (nl == NULL)
            break; /* bytes after the last newline: no line */
        Py_ssize_t end = nl - line;
        pos += end + 1;
        Py_ssize_t i = index++;
        if (job->mask != NULL && (i >= job->mask_size || !job->mask[i]))
            continue;
        Matcher mt = {job->pieces, job->npieces, line, end, MATCH_BUDGET};
        int matched = match_greedy(&mt) ? 1 : match_from(&mt, 0, 0);
        if (matched < 0)
            return -1;
        if (!matched)
            continue;
        if (count_runs(line, end, job->starts, job->stops, job->count + 1) != job->count)
            continue;
        if (read >= job->room)
            return -1;
        int64_t step;
        int got = read_step(line + job->starts[job->step], job->stops[job->step] - job->starts[job->step], &step);
        if (got == -1)
            continue; /* `step 1.5`, `step -3`: no step line */
        if (got < 0)
            return -1;
        double *row = job->out_values + read * job->nmetrics;
        for (Py_ssize_t m = 0; m < job->nmetrics; m++) {
            Py_ssize_t r = job->metrics[m];
            if (read_value(line + job->starts[r], job->stops[r] - job->starts[r], &row[m]) < 0)
                return -1;
        }
        job->out_lines[read] = i;
        job->out_steps[read] = step;
        read++;
    }
    return read;
}

/* A writable buffer of at least `size` bytes from `obj`, or an exception. */
static int writable(PyObject *obj, Py_buffer *view, Py_ssize_t size, const char *name)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->len < size) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, %zd needed", name, view->len, size);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(read_shape_doc,
"read_shape(data, mask, pieces, count, step, metrics, lines, steps, values) -> int\n\n"
"Read the lines of `data` (bytes of whole lines) that have the shape `pieces` (literal bytes around\n"
"the numbers) and `count` runs of number characters: the index of each line read into `lines` (int64),\n"
"its step (the run at `step`) into `steps` (int64) and the runs at `metrics` into `values` (float64,\n"
"one row a line). `mask`: None, or one byte per line (0: skip the line). Returns the lines read, or -1\n"
"when the Python reader must decide (see columns.c).");

static PyObject *read_shape(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer data, mask = {0}, lines, steps, values;
    PyObject *mask_obj, *pieces_obj, *metrics_obj, *lines_obj, *steps_obj, *values_obj;
    Py_ssize_t count, step;
    if (!PyArg_ParseTuple(args, "y*OO!nnO!OOO", &data, &mask_obj, &PyTuple_Type, &pieces_obj, &count, &step,
                          &PyTuple_Type, &metrics_obj, &lines_obj, &steps_obj, &values_obj))
        return NULL;
    PyObject *result = NULL;
    Piece *pieces = NULL;
    Py_ssize_t *metrics = NULL, *runs = NULL;
    int have_mask = 0, have_lines = 0, have_steps = 0, have_values = 0;
    Py_ssize_t npieces = PyTuple_GET_SIZE(pieces_obj), nmetrics = PyTuple_GET_SIZE(metrics_obj);
    if (npieces < 1 || count < 1 || step < 0 || step >= count) {
        PyErr_SetString(PyExc_ValueError, "read_shape: no pieces, or a step outside the runs");
        goto done;
    }
    if (mask_obj != Py_None) {
        if (PyObject_GetBuffer(mask_obj, &mask, PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        have_mask = 1;
    }
    pieces = PyMem_Calloc((size_t)npieces, sizeof(Piece));
    metrics = PyMem_Calloc((size_t)nmetrics + 1, sizeof(Py_ssize_t));
    runs = PyMem_Calloc(2 * ((size_t)count + 1), sizeof(Py_ssize_t));
    if (pieces == NULL || metrics == NULL || runs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < npieces; i++) { /* bytes objects: kept alive by the tuple, immutable */
        PyObject *p = PyTuple_GET_ITEM(pieces_obj, i);
        if (!PyBytes_Check(p)) {
            PyErr_SetString(PyExc_TypeError, "read_shape: pieces must be bytes");
            goto done;
        }
        pieces[i].bytes = (const unsigned char *)PyBytes_AS_STRING(p);
        pieces[i].size = PyBytes_GET_SIZE(p);
    }
    for (Py_ssize_t i = 0; i < nmetrics; i++) {
        metrics[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(metrics_obj, i));
        if (metrics[i] == -1 && PyErr_Occurred())
            goto done;
        if (metrics[i] < 0 || metrics[i] >= count) {
            PyErr_SetString(PyExc_ValueError, "read_shape: a metric outside the runs");
            goto done;
        }
    }
    /* the outputs hold one row per line at most: as many lines as newlines */
    Py_ssize_t room = 0;
    for (const unsigned char *p = data.buf, *e = p + data.len; (p = memchr(p, '\n', (size_t)(e - p))) != NULL; p++)
        room++;
    if (writable(lines_obj, &lines, room * 8, "lines") < 0)
        goto done;
    have_lines = 1;
    if (writable(steps_obj, &steps, room * 8, "steps") < 0)
        goto done;
    have_steps = 1;
    if (writable(values_obj, &values, room * nmetrics * 8, "values") < 0)
        goto done;
    have_values = 1;
    Job job = {data.buf, data.len, have_mask ? mask.buf : NULL, have_mask ? mask.len : 0, pieces, npieces, count,
               step, metrics, nmetrics, runs, runs + count + 1, lines.buf, steps.buf, values.buf, room};
    Py_ssize_t read;
    Py_BEGIN_ALLOW_THREADS
    read = read_block(&job);
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(read);
done:
    if (have_values)
        PyBuffer_Release(&values);
    if (have_steps)
        PyBuffer_Release(&steps);
    if (have_lines)
        PyBuffer_Release(&lines);
    if (have_mask)
        PyBuffer_Release(&mask);
    PyBuffer_Release(&data);
    PyMem_Free(pieces);
    PyMem_Free(metrics);
    PyMem_Free(runs);
    return result;
}

static PyMethodDef methods[] = {
    {"read_shape", read_shape, METH_VARARGS, read_shape_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ledger._native._columns",
    "The template reader of line capture, compiled (see columns.c; the Python reader is the fallback).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__columns(void)
{
    init_classes();
    return PyModule_Create(&module);
}
