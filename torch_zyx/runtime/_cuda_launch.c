/* torch_zyx.runtime._cuda_launch: a CUDA plan's kernel launches in one call.
 *
 * Stage 6 of the flow (... -> renderer -> **device**), for runtime/cuda.py. Launching through
 * cuda-bindings costs a few microseconds of Python per kernel (the argument array filled item
 * by item, the call's conversions, its result tuple); a realization or a compiled graph of many
 * small kernels paid it for each. This module fills every launch's argument array first and
 * then calls the driver's cuLaunchKernel for each, in order, on one stream:
 *
 *   launch_each(launch, stream, steps, pointers, params) -> (result, step)
 *
 * ``launch`` is the address of cuLaunchKernel, ``stream`` a CUstream (as an int), each step a
 * tuple (function, grid, block, slots, param indices, end, shared bytes): the kernel
 * ``function`` (a CUfunction as an int) on ``grid`` blocks of ``block`` threads with ``shared
 * bytes`` of dynamic shared memory and its arguments, all 8 bytes wide, as runtime/cuda.py's
 * kernels take them: the device pointers ``pointers[slots]``, the parameters
 * ``params[indices]``, then ``end``. Returns (0, -1), or the first failing launch's
 * CUresult and step index (the launches after it are not made). The GIL is released while the
 * driver is called.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "_words.h"

typedef int (*launch_fn)(void *function, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,
                         unsigned block_y, unsigned block_z, unsigned shared_bytes, void *stream, void **args,
                         void **extra);

/* One launch: where its argument values start in the values array, and how many there are. */
typedef struct {
    void *function;
    unsigned grid, block, shared_bytes;
    Py_ssize_t first, count;
} Launch;

/* Fills ``launches`` and ``values`` from the steps (the GIL held); 0 on error. */
static int
gather(PyObject *steps, PyObject *pointers, PyObject *params, Launch *launches, uint64_t *values)
{
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(steps); i++) {
        PyObject *step = PySequence_Fast_GET_ITEM(steps, i);
        PyObject *slots = PyTuple_GET_ITEM(step, 3), *indices = PyTuple_GET_ITEM(step, 4);
        Launch *launch = &launches[i];
        launch->function = PyLong_AsVoidPtr(PyTuple_GET_ITEM(step, 0));
        launch->grid = (unsigned)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(step, 1));
        launch->block = (unsigned)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(step, 2));
        launch->shared_bytes = (unsigned)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(step, 6));
        long long end = PyLong_AsLongLong(PyTuple_GET_ITEM(step, 5));
        if (PyErr_Occurred())
            return 0;
        launch->first = at;
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(slots); j++)
            if (!word_at(pointers, PyTuple_GET_ITEM(slots, j), &values[at++], "launch_each"))
                return 0;
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(indices); j++)
            if (!word_at(params, PyTuple_GET_ITEM(indices, j), &values[at++], "launch_each"))
                return 0;
        values[at++] = (uint64_t)end;
        launch->count = at - launch->first;
    }
    return 1;
}

static PyObject *
py_launch_each(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "launch_each(launch, stream, steps, pointers, params)");
        return NULL;
    }
    launch_fn launch = (launch_fn)PyLong_AsVoidPtr(args[0]);
    void *stream = PyLong_AsVoidPtr(args[1]);
    if (PyErr_Occurred())
        return NULL;
    if (launch == NULL) {
        PyErr_SetString(PyExc_ValueError, "launch_each: a null cuLaunchKernel address");
        return NULL;
    }
    PyObject *steps = PySequence_Fast(args[2], "steps must be a sequence");
    PyObject *pointers = steps ? PySequence_Fast(args[3], "pointers must be a sequence of ints") : NULL;
    PyObject *params = pointers ? PySequence_Fast(args[4], "params must be a sequence of ints") : NULL;
    PyObject *result = NULL;
    Launch *launches = NULL;
    uint64_t *values = NULL;
    void **arg_pointers = NULL;
    if (params == NULL)
        goto done;
    Py_ssize_t n_steps = PySequence_Fast_GET_SIZE(steps), n_values = 0;
    for (Py_ssize_t i = 0; i < n_steps; i++) {
        PyObject *step = PySequence_Fast_GET_ITEM(steps, i);
        if (!PyTuple_Check(step) || PyTuple_GET_SIZE(step) != 7 || !PyTuple_Check(PyTuple_GET_ITEM(step, 3))
                || !PyTuple_Check(PyTuple_GET_ITEM(step, 4))) {
            PyErr_SetString(PyExc_TypeError, "launch_each: a step is (function, grid, block, slots, param "
                                             "indices, end, shared bytes)");
            goto done;
        }
        n_values += PyTuple_GET_SIZE(PyTuple_GET_ITEM(step, 3)) + PyTuple_GET_SIZE(PyTuple_GET_ITEM(step, 4)) + 1;
    }
    launches = PyMem_Malloc((n_steps ? n_steps : 1) * sizeof(Launch));
    values = PyMem_Malloc((n_values ? n_values : 1) * sizeof(uint64_t));
    arg_pointers = PyMem_Malloc((n_values ? n_values : 1) * sizeof(void *));
    if (launches == NULL || values == NULL || arg_pointers == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (!gather(steps, pointers, params, launches, values))
        goto done;
    for (Py_ssize_t i = 0; i < n_values; i++)
        arg_pointers[i] = &values[i];
    int failed = 0;
    Py_ssize_t failed_step = -1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n_steps; i++) {
        Launch *l = &launches[i];
        failed = launch(l->function, l->grid, 1, 1, l->block, 1, 1, l->shared_bytes, stream,
                        arg_pointers + l->first, NULL);
        if (failed) {
            failed_step = i;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(in)", failed, failed_step);
done:
    PyMem_Free(launches);
    PyMem_Free(values);
    PyMem_Free(arg_pointers);
    Py_XDECREF(steps);
    Py_XDECREF(pointers);
    Py_XDECREF(params);
    return result;
}

static PyMethodDef module_methods[] = {
    {"launch_each", (PyCFunction)(void (*)(void))py_launch_each, METH_FASTCALL,
     "launch_each(launch, stream, steps, pointers, params) -> (CUresult, failing step or -1)"},
    {NULL},
};

static struct PyModuleDef cuda_launch_module = {
    PyModuleDef_HEAD_INIT, "_cuda_launch", "A CUDA plan's kernel launches in one call.", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__cuda_launch(void)
{
    return PyModule_Create(&cuda_launch_module);
}
