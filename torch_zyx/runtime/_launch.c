/* torch_zyx.runtime._launch: the CPU runtime's foreign calls, without ctypes objects.
 *
 * Stage 6 of the flow (... -> renderer -> **device**). Every CPU launch calls machine code: the
 * kernel itself, its parallel entry, the OpenMP runtime's region calls. Through ctypes each
 * launch built a pointer array, a parameter array and a task structure as ctypes objects, and
 * each call converted its arguments: a few microseconds per launch warm, several times that
 * when the interpreter's caches are cold after a large kernel. This module does the same in C,
 * with the same contract (runtime/cpu_calls.py picks it when it is built, ctypes otherwise):
 *
 *   Task(pointers, params, end, chunk, homes, backward)   one launch's task (what the parallel
 *                                          entry reads: { ptr buffers, ptr params, ptr counters,
 *                                          i64 end, i64 chunk, i64 homes, i64 backward }),
 *                                          owning its two arrays and its ``homes`` chunk
 *                                          counters (zeroed, one per cache line); ``backward``
 *                                          (default 0): each home block's chunks last first
 *                                          (cpu.py ``_PARALLEL_ENTRY``); ``address``
 *   serial(kernel, pointers, params, start, end)   kernel(buffers, params, start, end)
 *   serial_each(steps, pointers, params)   each step (kernel, slots, param indices, end) in
 *                                          order: kernel(pointers[slots], params[indices], 0, end)
 *   entry(entry, task)                     the parallel entry on this thread: entry(task)
 *   omp_parallel(parallel, entry, task, threads)   GOMP_parallel(entry, task, threads, 0)
 *   omp_start(start, entry, task, threads) GOMP_parallel_start(entry, task, threads)
 *   omp_end(end)                           GOMP_parallel_end()
 *   omp_team_size(fn)                      omp_get_num_threads()
 *
 * Functions are passed as addresses (ints). Every call that runs machine code releases the GIL,
 * as ctypes does: other Python threads keep recording while a kernel runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>
#include <string.h>

#include "_words.h"

typedef struct {
    void **buffers;
    int64_t *params;
    int64_t *counters;
    int64_t end;
    int64_t chunk;
    int64_t homes;
    int64_t backward;  /* 1: each home block's chunks are taken last first */
} TaskData;

/* Words between two homes' counters: one 64-byte cache line each (no false sharing). */
#define COUNTER_WORDS 8
/* The most home blocks a task has (cpu_calls.py MAX_HOMES). */
#define MAX_HOMES 4096

typedef struct {
    PyObject_VAR_HEAD
    TaskData data;
    /* ob_size words: the buffer pointers, the parameters, then the counters (from the first
     * 64-byte boundary on) */
    int64_t words[1];
} TaskObject;

typedef void (*kernel_fn)(void **, int64_t *, int64_t, int64_t);
typedef void (*entry_fn)(void *);
typedef void (*gomp_parallel_fn)(entry_fn, void *, unsigned, unsigned);
typedef void (*gomp_start_fn)(entry_fn, void *, unsigned);
typedef void (*gomp_end_fn)(void);
typedef int (*team_size_fn)(void);

static PyTypeObject TaskType;

/* The address ``value`` (an int) as a pointer; NULL with an error set for 0 or a non-int. */
static void *
address_of(PyObject *value, const char *what)
{
    void *address = PyLong_AsVoidPtr(value);
    if (address == NULL && !PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "%s: a null address", what);
    return address;
}

/* Copies the ints of ``seq`` (a list or tuple) into ``out`` (``n`` of them); 0 on error. */
static int
copy_words(PyObject *seq, Py_ssize_t n, int64_t *out)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        /* (pointers may exceed INT64_MAX as unsigned: read them as unsigned) */
        unsigned long long value = PyLong_AsUnsignedLongLongMask(item);
        if (value == (unsigned long long)-1 && PyErr_Occurred())
            return 0;
        out[i] = (int64_t)value;
    }
    return 1;
}

/* A launch's two arrays, as one block of words: the buffer pointers, then the parameters, at
 * least one word each (the kernel may take the address of an empty array). */
typedef struct {
    PyObject *ptrs, *prms;  /* the given sequences, as lists or tuples */
    Py_ssize_t n_ptrs, n_params;
    Py_ssize_t n_words;  /* the block's size */
} Arrays;

/* Takes ``pointers`` and ``params`` (sequences of ints) for ``arrays``; 0 on error. */
static int
arrays_open(PyObject *pointers, PyObject *params, Arrays *arrays)
{
    arrays->ptrs = PySequence_Fast(pointers, "pointers must be a sequence of ints");
    arrays->prms = arrays->ptrs ? PySequence_Fast(params, "params must be a sequence of ints") : NULL;
    if (arrays->prms == NULL) {
        Py_XDECREF(arrays->ptrs);
        return 0;
    }
    arrays->n_ptrs = PySequence_Fast_GET_SIZE(arrays->ptrs);
    arrays->n_params = PySequence_Fast_GET_SIZE(arrays->prms);
    arrays->n_words = (arrays->n_ptrs ? arrays->n_ptrs : 1) + (arrays->n_params ? arrays->n_params : 1);
    return 1;
}

/* Writes the arrays into ``words`` (``n_words`` of them); the parameters' start is returned in
 * ``param_words``. 0 on error. */
static int
arrays_fill(Arrays *arrays, int64_t *words, int64_t **param_words)
{
    *param_words = words + (arrays->n_ptrs ? arrays->n_ptrs : 1);
    words[0] = 0;
    (*param_words)[0] = 0;
    return copy_words(arrays->ptrs, arrays->n_ptrs, words) &&
           copy_words(arrays->prms, arrays->n_params, *param_words);
}

static void
arrays_close(Arrays *arrays)
{
    Py_DECREF(arrays->ptrs);
    Py_DECREF(arrays->prms);
}

static int
check_args(Py_ssize_t nargs, Py_ssize_t wanted, const char *usage)
{
    if (nargs != wanted) {
        PyErr_SetString(PyExc_TypeError, usage);
        return 0;
    }
    return 1;
}

static PyObject *
task_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *pointers, *params;
    long long end, chunk, homes, backward = 0;
    Arrays arrays;
    if (!PyArg_ParseTuple(args, "OOLLL|L:Task", &pointers, &params, &end, &chunk, &homes, &backward))
        return NULL;
    if (chunk < 1 || homes < 1 || homes > MAX_HOMES) {
        PyErr_Format(PyExc_ValueError, "Task: chunk %lld and homes %lld must be positive (homes <= %d)",
                     chunk, homes, MAX_HOMES);
        return NULL;
    }
    if (!arrays_open(pointers, params, &arrays))
        return NULL;
    Py_ssize_t counter_words = homes * COUNTER_WORDS + COUNTER_WORDS - 1;  /* (with alignment) */
    TaskObject *task = PyObject_NewVar(TaskObject, type, arrays.n_words + counter_words);
    int64_t *param_words;
    if (task != NULL && !arrays_fill(&arrays, task->words, &param_words))
        Py_CLEAR(task);
    arrays_close(&arrays);
    if (task == NULL)
        return NULL;
    task->data.buffers = (void **)task->words;
    task->data.params = param_words;
    uintptr_t after_arrays = (uintptr_t)(task->words + arrays.n_words);
    int64_t *counters = (int64_t *)((after_arrays + 63) & ~(uintptr_t)63);
    memset(counters, 0, homes * COUNTER_WORDS * sizeof(int64_t));
    task->data.counters = counters;
    task->data.end = end;
    task->data.chunk = chunk;
    task->data.homes = homes;
    task->data.backward = backward != 0;
    return (PyObject *)task;
}

static PyObject *
task_address(TaskObject *self, void *closure)
{
    return PyLong_FromVoidPtr(&self->data);
}

static PyGetSetDef task_getset[] = {
    {"address", (getter)task_address, NULL, "the address of the task the parallel entry reads", NULL},
    {NULL},
};

static PyTypeObject TaskType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "torch_zyx.runtime._launch.Task",
    .tp_basicsize = offsetof(TaskObject, words),
    .tp_itemsize = sizeof(int64_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Task(pointers, params, end, chunk, homes, backward=0): one parallel launch's task and "
               "its arrays.",
    .tp_getset = task_getset,
    .tp_new = task_new,
};

static TaskData *
task_data(PyObject *task)
{
    if (Py_TYPE(task) != &TaskType) {
        PyErr_Format(PyExc_TypeError, "expected a Task, got %R", Py_TYPE(task));
        return NULL;
    }
    return &((TaskObject *)task)->data;
}

/* serial(kernel, pointers, params, start, end): the kernel over [start, end) on this thread. */
static PyObject *
py_serial(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!check_args(nargs, 5, "serial(kernel, pointers, params, start, end)"))
        return NULL;
    kernel_fn kernel = (kernel_fn)address_of(args[0], "serial");
    if (kernel == NULL)
        return NULL;
    long long start = PyLong_AsLongLong(args[3]), end = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    Arrays arrays;
    if (!arrays_open(args[1], args[2], &arrays))
        return NULL;
    /* Small launches (the common case) need no allocation. */
    int64_t local[64];
    int64_t *words = arrays.n_words <= 64 ? local : PyMem_Malloc(arrays.n_words * sizeof(int64_t));
    int64_t *param_words;
    PyObject *result = NULL;
    if (words == NULL) {
        PyErr_NoMemory();
    } else if (arrays_fill(&arrays, words, &param_words)) {
        Py_BEGIN_ALLOW_THREADS
        kernel((void **)words, param_words, start, end);
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    if (words != local)
        PyMem_Free(words);
    arrays_close(&arrays);
    return result;
}

/* serial_each(steps, pointers, params): a plan's launches that each run on this thread (small
 * ones), in order, in one call: every step's arrays are gathered first (the GIL held), then
 * the kernels run one after the other with the GIL released. A step is a tuple (kernel, slots,
 * param indices, end): kernel(pointers[slots], params[indices], 0, end). */
static PyObject *
py_serial_each(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!check_args(nargs, 3, "serial_each(steps, pointers, params)"))
        return NULL;
    PyObject *steps = PySequence_Fast(args[0], "steps must be a sequence");
    if (steps == NULL)
        return NULL;
    PyObject *pointers = PySequence_Fast(args[1], "pointers must be a sequence of ints");
    PyObject *params = pointers ? PySequence_Fast(args[2], "params must be a sequence of ints") : NULL;
    Py_ssize_t n_steps = PySequence_Fast_GET_SIZE(steps), n_words = 0;
    PyObject *result = NULL;
    int64_t *words = NULL;
    /* Per step: kernel, end, its buffers' offset and its params' offset in ``words``. */
    int64_t *plan = NULL;
    if (params == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n_steps; i++) {
        PyObject *step = PySequence_Fast_GET_ITEM(steps, i);
        if (!PyTuple_Check(step) || PyTuple_GET_SIZE(step) != 4 || !PyTuple_Check(PyTuple_GET_ITEM(step, 1))
                || !PyTuple_Check(PyTuple_GET_ITEM(step, 2))) {
            PyErr_SetString(PyExc_TypeError, "serial_each: a step is (kernel, slots, param indices, end)");
            goto done;
        }
        Py_ssize_t n_slots = PyTuple_GET_SIZE(PyTuple_GET_ITEM(step, 1));
        Py_ssize_t n_params = PyTuple_GET_SIZE(PyTuple_GET_ITEM(step, 2));
        n_words += (n_slots ? n_slots : 1) + (n_params ? n_params : 1);
    }
    words = PyMem_Malloc((n_words ? n_words : 1) * sizeof(int64_t));
    plan = PyMem_Malloc((n_steps ? n_steps : 1) * 4 * sizeof(int64_t));
    if (words == NULL || plan == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < n_steps; i++) {
        PyObject *step = PySequence_Fast_GET_ITEM(steps, i);
        PyObject *slots = PyTuple_GET_ITEM(step, 1), *indices = PyTuple_GET_ITEM(step, 2);
        void *kernel = address_of(PyTuple_GET_ITEM(step, 0), "serial_each");
        long long end = PyLong_AsLongLong(PyTuple_GET_ITEM(step, 3));
        if (kernel == NULL || (end == -1 && PyErr_Occurred()))
            goto done;
        plan[4 * i] = (int64_t)(uintptr_t)kernel;
        plan[4 * i + 1] = end;
        plan[4 * i + 2] = at;
        Py_ssize_t n_slots = PyTuple_GET_SIZE(slots), n_params = PyTuple_GET_SIZE(indices);
        words[at] = 0;
        for (Py_ssize_t j = 0; j < n_slots; j++)
            if (!word_at(pointers, PyTuple_GET_ITEM(slots, j), (uint64_t *)&words[at + j], "serial_each"))
                goto done;
        at += n_slots ? n_slots : 1;
        plan[4 * i + 3] = at;
        words[at] = 0;
        for (Py_ssize_t j = 0; j < n_params; j++)
            if (!word_at(params, PyTuple_GET_ITEM(indices, j), (uint64_t *)&words[at + j], "serial_each"))
                goto done;
        at += n_params ? n_params : 1;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n_steps; i++)
        ((kernel_fn)(uintptr_t)plan[4 * i])((void **)(words + plan[4 * i + 2]), words + plan[4 * i + 3], 0,
                                            plan[4 * i + 1]);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(words);
    PyMem_Free(plan);
    Py_DECREF(steps);
    Py_XDECREF(pointers);
    Py_XDECREF(params);
    return result;
}

/* entry(entry, task): the parallel entry on this thread (it takes chunks until none are left). */
static PyObject *
py_entry(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!check_args(nargs, 2, "entry(entry, task)"))
        return NULL;
    entry_fn fn = (entry_fn)address_of(args[0], "entry");
    TaskData *data = fn ? task_data(args[1]) : NULL;
    if (data == NULL)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    fn(data);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* The arguments of omp_parallel and omp_start: (runtime function, entry, task, threads). */
typedef struct {
    void *runtime_fn;
    entry_fn entry;
    TaskData *data;
    unsigned threads;
} RegionArgs;

static int
region_args(PyObject *const *args, Py_ssize_t nargs, const char *usage, RegionArgs *out)
{
    if (!check_args(nargs, 4, usage))
        return 0;
    out->runtime_fn = address_of(args[0], usage);
    out->entry = out->runtime_fn ? (entry_fn)address_of(args[1], usage) : NULL;
    out->data = out->entry ? task_data(args[2]) : NULL;
    unsigned long threads = out->data ? PyLong_AsUnsignedLong(args[3]) : 0;
    out->threads = (unsigned)threads;
    return out->data != NULL && !PyErr_Occurred();
}

/* omp_parallel(parallel, entry, task, threads): one whole region (GOMP_parallel). */
static PyObject *
py_omp_parallel(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    RegionArgs region;
    if (!region_args(args, nargs, "omp_parallel(parallel, entry, task, threads)", &region))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    ((gomp_parallel_fn)region.runtime_fn)(region.entry, region.data, region.threads, 0);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* omp_start(start, entry, task, threads): the region started (GOMP_parallel_start); its other
 * threads run the entry while this one returns. */
static PyObject *
py_omp_start(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    RegionArgs region;
    if (!region_args(args, nargs, "omp_start(start, entry, task, threads)", &region))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    ((gomp_start_fn)region.runtime_fn)(region.entry, region.data, region.threads);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* omp_end(end): the region this thread started, ended (GOMP_parallel_end: its end barrier). */
static PyObject *
py_omp_end(PyObject *module, PyObject *end_address)
{
    gomp_end_fn end = (gomp_end_fn)address_of(end_address, "omp_end");
    if (end == NULL)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    end();
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* omp_team_size(fn): omp_get_num_threads() (the threads of the region this thread is in). */
static PyObject *
py_omp_team_size(PyObject *module, PyObject *fn_address)
{
    team_size_fn fn = (team_size_fn)address_of(fn_address, "omp_team_size");
    if (fn == NULL)
        return NULL;
    return PyLong_FromLong(fn());
}

static PyMethodDef module_methods[] = {
    {"serial", (PyCFunction)(void (*)(void))py_serial, METH_FASTCALL,
     "serial(kernel, pointers, params, start, end): kernel(buffers, params, start, end)"},
    {"serial_each", (PyCFunction)(void (*)(void))py_serial_each, METH_FASTCALL,
     "serial_each(steps, pointers, params): each step (kernel, slots, param indices, end) in order"},
    {"entry", (PyCFunction)(void (*)(void))py_entry, METH_FASTCALL,
     "entry(entry, task): the parallel entry on this thread"},
    {"omp_parallel", (PyCFunction)(void (*)(void))py_omp_parallel, METH_FASTCALL,
     "omp_parallel(parallel, entry, task, threads): GOMP_parallel(entry, task, threads, 0)"},
    {"omp_start", (PyCFunction)(void (*)(void))py_omp_start, METH_FASTCALL,
     "omp_start(start, entry, task, threads): GOMP_parallel_start(entry, task, threads)"},
    {"omp_end", py_omp_end, METH_O, "omp_end(end): GOMP_parallel_end()"},
    {"omp_team_size", py_omp_team_size, METH_O, "omp_team_size(fn): omp_get_num_threads()"},
    {NULL},
};

static struct PyModuleDef launch_module = {
    PyModuleDef_HEAD_INIT, "_launch", "The CPU runtime's foreign calls, without ctypes objects.", -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__launch(void)
{
    if (PyType_Ready(&TaskType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&launch_module);
    if (module == NULL)
        return NULL;
    Py_INCREF(&TaskType);
    if (PyModule_AddObject(module, "Task", (PyObject *)&TaskType) < 0)
        return NULL;
    return module;
}
