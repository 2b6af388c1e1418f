/* torch_zyx.lazy._native: the lazy graph's node table and signature walk in C.
 *
 * Stage 2 of the flow (dispatch -> lazy graph -> kernelizer -> ...). Recording builds a few
 * graph nodes per aten op and every realization walks its graph once for the schedule
 * cache's key; in Python these were most of the per-call cost after dispatch itself. This
 * module is the same surface as nodes_py.py (the reference implementation, used where this
 * one is not built or ZYX_NATIVE=0):
 *
 *   Node(op, arg, srcs, dtype, shape)   the interned node (hash-consed: built once per key)
 *   intern(op, arg, karg, srcs, dtype, shape)   the same with ``arg`` already keyed
 *   binary_node(op, x, y, dtype), unary_node(op, x)   recording's fast constructors
 *   pending                              nodes built since the last realization (.count)
 *   walk(roots)                          the signature walk (kernelize.GraphSignature)
 *
 * The table maps a node's key (op, keyed arg, srcs, dtype, shape) to the node's address; a
 * node removes its entry when it dies, so the table holds no reference to live nodes and
 * needs no weak references. Nodes are not tracked by the cyclic GC: they only reference
 * their sources (older nodes), their arg (a buffer handle or plain values) and dtypes, so
 * they are never part of a cycle, and untracked objects cost collections nothing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    PyObject *op, *arg, *karg, *srcs, *dtype, *shape;
    PyObject *key; /* its key in the table */
    PyObject *weakreflist;
} NodeObject;

typedef struct {
    PyObject_HEAD
    Py_ssize_t count;
} PendingObject;

static PyTypeObject NodeType;
static PyTypeObject PendingType;
static PyObject *table;          /* key -> PyLong address of the live node */
static PendingObject *pending;   /* the module's ``pending`` counter */
static PyObject *float_tag;      /* "f": floats are keyed as ("f", repr(value)) */

/* ``arg`` as keyed: floats by their repr (keeps -0.0 and nan distinct and equal to
 * themselves), tuples element by element, anything else as it is. */
static PyObject *
hashable(PyObject *arg)
{
    if (PyFloat_Check(arg)) {
        PyObject *text = PyObject_Repr(arg);
        if (text == NULL)
            return NULL;
        PyObject *keyed = PyTuple_Pack(2, float_tag, text);
        Py_DECREF(text);
        return keyed;
    }
    if (PyTuple_Check(arg)) {
        Py_ssize_t n = PyTuple_GET_SIZE(arg);
        PyObject *keyed = PyTuple_New(n);
        if (keyed == NULL)
            return NULL;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = hashable(PyTuple_GET_ITEM(arg, i));
            if (item == NULL) {
                Py_DECREF(keyed);
                return NULL;
            }
            PyTuple_SET_ITEM(keyed, i, item);
        }
        return keyed;
    }
    Py_INCREF(arg);
    return arg;
}

/* The node of ``key`` (a new reference), built from the other arguments when it is not in
 * the table. Steals ``key``. */
static PyObject *
intern_key(PyObject *key, PyObject *op, PyObject *arg, PyObject *karg, PyObject *srcs,
           PyObject *dtype, PyObject *shape)
{
    PyObject *address = PyDict_GetItemWithError(table, key);
    if (address != NULL) {
        PyObject *existing = (PyObject *)PyLong_AsVoidPtr(address);
        Py_DECREF(key);
        Py_INCREF(existing);
        return existing;
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return NULL;
    }
    NodeObject *node = PyObject_New(NodeObject, &NodeType);
    if (node == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    Py_INCREF(op);
    Py_INCREF(arg);
    Py_INCREF(karg);
    Py_INCREF(srcs);
    Py_INCREF(dtype);
    Py_INCREF(shape);
    node->op = op;
    node->arg = arg;
    node->karg = karg;
    node->srcs = srcs;
    node->dtype = dtype;
    node->shape = shape;
    node->key = key;
    node->weakreflist = NULL;
    address = PyLong_FromVoidPtr(node);
    if (address == NULL || PyDict_SetItem(table, key, address) < 0) {
        Py_XDECREF(address);
        node->key = NULL; /* not entered: its dealloc must not look for it */
        Py_DECREF(key);
        Py_DECREF(node);
        return NULL;
    }
    Py_DECREF(address);
    pending->count++;
    return (PyObject *)node;
}

static PyObject *
intern_node(PyObject *op, PyObject *arg, PyObject *karg, PyObject *srcs, PyObject *dtype,
            PyObject *shape)
{
    if (!PyTuple_CheckExact(srcs) || !PyTuple_CheckExact(shape)) {
        PyErr_SetString(PyExc_TypeError, "a node's srcs and shape must be tuples");
        return NULL;
    }
    PyObject *key = PyTuple_Pack(5, op, karg, srcs, dtype, shape);
    if (key == NULL)
        return NULL;
    return intern_key(key, op, arg, karg, srcs, dtype, shape);
}

static void
node_dealloc(NodeObject *self)
{
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    if (self->key != NULL) {
        /* A node may die while an exception is being raised: keep it. */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        PyObject *address = PyDict_GetItemWithError(table, self->key);
        if (address != NULL && PyLong_AsVoidPtr(address) == (void *)self)
            PyDict_DelItem(table, self->key);
        PyErr_Clear();
        PyErr_Restore(type, value, traceback);
        Py_DECREF(self->key);
    }
    Py_DECREF(self->op);
    Py_DECREF(self->arg);
    Py_DECREF(self->karg);
    Py_DECREF(self->srcs);
    Py_DECREF(self->dtype);
    Py_DECREF(self->shape);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
node_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *op, *arg, *srcs, *dtype, *shape;
    static char *names[] = {"op", "arg", "srcs", "dtype", "shape", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOO:Node", names, &op, &arg, &srcs,
                                     &dtype, &shape))
        return NULL;
    /* (only plain floats and tuples are keyed otherwise, as in nodes_py.Node) */
    PyObject *karg;
    if (PyFloat_CheckExact(arg) || PyTuple_CheckExact(arg))
        karg = hashable(arg);
    else {
        Py_INCREF(arg);
        karg = arg;
    }
    if (karg == NULL)
        return NULL;
    PyObject *node = intern_node(op, arg, karg, srcs, dtype, shape);
    Py_DECREF(karg);
    return node;
}

static PyObject *
node_repr(NodeObject *self)
{
    if (self->arg == Py_None)
        return PyUnicode_FromFormat("<%U %R %R>", self->op, self->dtype, self->shape);
    return PyUnicode_FromFormat("<%U %R %R %R>", self->op, self->arg, self->dtype, self->shape);
}

static PyObject *
node_get_key(NodeObject *self, void *closure)
{
    return PyTuple_Pack(5, self->op, self->karg, self->srcs, self->dtype, self->shape);
}

static PyObject *
node_get_numel(NodeObject *self, void *closure)
{
    PyObject *numel = PyLong_FromLong(1);
    Py_ssize_t n = PyTuple_GET_SIZE(self->shape);
    for (Py_ssize_t i = 0; i < n && numel != NULL; i++) {
        PyObject *product = PyNumber_Multiply(numel, PyTuple_GET_ITEM(self->shape, i));
        Py_DECREF(numel);
        numel = product;
    }
    return numel;
}

static PyMemberDef node_members[] = {
    {"op", T_OBJECT_EX, offsetof(NodeObject, op), READONLY, NULL},
    {"arg", T_OBJECT_EX, offsetof(NodeObject, arg), READONLY, NULL},
    {"_karg", T_OBJECT_EX, offsetof(NodeObject, karg), READONLY, "arg as keyed"},
    {"srcs", T_OBJECT_EX, offsetof(NodeObject, srcs), READONLY, NULL},
    {"dtype", T_OBJECT_EX, offsetof(NodeObject, dtype), READONLY, NULL},
    {"shape", T_OBJECT_EX, offsetof(NodeObject, shape), READONLY, NULL},
    {NULL},
};

static PyGetSetDef node_getset[] = {
    {"_key", (getter)node_get_key, NULL, "(op, keyed arg, srcs, dtype, shape)", NULL},
    {"numel", (getter)node_get_numel, NULL, "number of elements", NULL},
    {NULL},
};

static PyTypeObject NodeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "torch_zyx.lazy._native.Node",
    .tp_basicsize = sizeof(NodeObject),
    .tp_dealloc = (destructor)node_dealloc,
    .tp_repr = (reprfunc)node_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One immutable, interned graph node (graph.py's module docstring).",
    .tp_weaklistoffset = offsetof(NodeObject, weakreflist),
    .tp_members = node_members,
    .tp_getset = node_getset,
    .tp_new = node_new,
};

static PyMemberDef pending_members[] = {
    {"count", T_PYSSIZET, offsetof(PendingObject, count), 0, "nodes built since the reset"},
    {NULL},
};

static PyTypeObject PendingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "torch_zyx.lazy._native.Pending",
    .tp_basicsize = sizeof(PendingObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Counts the nodes built since the last realization.",
    .tp_members = pending_members,
};

static PyObject *
py_intern(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "intern(op, arg, karg, srcs, dtype, shape)");
        return NULL;
    }
    return intern_node(args[0], args[1], args[2], args[3], args[4], args[5]);
}

static int
check_node(PyObject *x)
{
    if (Py_TYPE(x) != &NodeType) {
        PyErr_Format(PyExc_TypeError, "expected a graph Node, got %R", Py_TYPE(x));
        return 0;
    }
    return 1;
}

static PyObject *binary_op; /* "BINARY" */
static PyObject *unary_op;  /* "UNARY" */

static PyObject *
py_binary_node(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "binary_node(op, x, y, dtype)");
        return NULL;
    }
    PyObject *op = args[0], *x = args[1], *y = args[2], *dtype = args[3];
    if (!check_node(x) || !check_node(y))
        return NULL;
    PyObject *shape = ((NodeObject *)x)->shape;
    PyObject *srcs = PyTuple_Pack(2, x, y);
    if (srcs == NULL)
        return NULL;
    PyObject *key = PyTuple_Pack(5, binary_op, op, srcs, dtype, shape);
    PyObject *node = NULL;
    if (key != NULL)
        node = intern_key(key, binary_op, op, op, srcs, dtype, shape);
    Py_DECREF(srcs);
    return node;
}

static PyObject *
py_unary_node(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "unary_node(op, x)");
        return NULL;
    }
    PyObject *op = args[0], *x = args[1];
    if (!check_node(x))
        return NULL;
    NodeObject *source = (NodeObject *)x;
    PyObject *srcs = PyTuple_Pack(1, x);
    if (srcs == NULL)
        return NULL;
    PyObject *key = PyTuple_Pack(5, unary_op, op, srcs, source->dtype, source->shape);
    PyObject *node = NULL;
    if (key != NULL)
        node = intern_key(key, unary_op, op, op, srcs, source->dtype, source->shape);
    Py_DECREF(srcs);
    return node;
}

static PyObject *
py_file_unfiled(PyObject *module, PyObject *unused)
{
    /* Nothing waits to be filed here: every node enters the table as it is built. */
    Py_RETURN_NONE;
}

/* The number of ``node`` in the walk, numbering it (and queueing it) when it is new. */
static PyObject *
number_of(PyObject *node, PyObject *positions, PyObject *nodes)
{
    PyObject *number = PyDict_GetItemWithError(positions, node);
    if (number != NULL) {
        Py_INCREF(number);
        return number;
    }
    if (PyErr_Occurred())
        return NULL;
    number = PyLong_FromSsize_t(PyList_GET_SIZE(nodes));
    if (number == NULL || PyDict_SetItem(positions, node, number) < 0 ||
        PyList_Append(nodes, node) < 0) {
        Py_XDECREF(number);
        return NULL;
    }
    return number;
}

/* walk(roots) -> (nodes, items, leaves, root_numbers): kernelize.GraphSignature's walk.
 * Nodes are numbered in breadth-first discovery order from the roots; items[i] is node i's
 * (op, keyed arg, source numbers, dtype, shape); leaves lists the numbers of the nodes
 * without sources, whose items the caller rewrites where a leaf is abstracted (buffers,
 * random seeds, scalar parameters). */
static PyObject *
py_walk(PyObject *module, PyObject *roots)
{
    PyObject *nodes = NULL, *items = NULL, *leaves = NULL, *root_numbers = NULL;
    PyObject *positions = PyDict_New();
    PyObject *fast = PySequence_Fast(roots, "walk() takes a sequence of nodes");
    if (positions == NULL || fast == NULL)
        goto fail;
    Py_ssize_t n_roots = PySequence_Fast_GET_SIZE(fast);
    nodes = PyList_New(0);
    items = PyList_New(0);
    leaves = PyList_New(0);
    root_numbers = PyTuple_New(n_roots);
    if (nodes == NULL || items == NULL || leaves == NULL || root_numbers == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n_roots; i++) {
        PyObject *root = PySequence_Fast_GET_ITEM(fast, i);
        if (!check_node(root))
            goto fail;
        PyObject *number = number_of(root, positions, nodes);
        if (number == NULL)
            goto fail;
        PyTuple_SET_ITEM(root_numbers, i, number);
    }
    /* The list grows while it is walked: the loop also visits the nodes it discovers. */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes); i++) {
        NodeObject *node = (NodeObject *)PyList_GET_ITEM(nodes, i);
        Py_ssize_t n_srcs = PyTuple_GET_SIZE(node->srcs);
        PyObject *numbers = PyTuple_New(n_srcs);
        if (numbers == NULL)
            goto fail;
        for (Py_ssize_t j = 0; j < n_srcs; j++) {
            PyObject *number = number_of(PyTuple_GET_ITEM(node->srcs, j), positions, nodes);
            if (number == NULL) {
                Py_DECREF(numbers);
                goto fail;
            }
            PyTuple_SET_ITEM(numbers, j, number);
        }
        if (n_srcs == 0) {
            PyObject *number = PyLong_FromSsize_t(i);
            if (number == NULL || PyList_Append(leaves, number) < 0) {
                Py_XDECREF(number);
                Py_DECREF(numbers);
                goto fail;
            }
            Py_DECREF(number);
        }
        PyObject *item = PyTuple_Pack(5, node->op, node->karg, numbers, node->dtype, node->shape);
        Py_DECREF(numbers);
        if (item == NULL || PyList_Append(items, item) < 0) {
            Py_XDECREF(item);
            goto fail;
        }
        Py_DECREF(item);
    }
    Py_DECREF(positions);
    Py_DECREF(fast);
    return Py_BuildValue("(NNNN)", nodes, items, leaves, root_numbers);
fail:
    Py_XDECREF(positions);
    Py_XDECREF(fast);
    Py_XDECREF(nodes);
    Py_XDECREF(items);
    Py_XDECREF(leaves);
    Py_XDECREF(root_numbers);
    return NULL;
}

static PyObject *
py_table_size(PyObject *module, PyObject *unused)
{
    return PyLong_FromSsize_t(PyDict_GET_SIZE(table));
}

static PyMethodDef module_methods[] = {
    {"intern", (PyCFunction)(void (*)(void))py_intern, METH_FASTCALL,
     "intern(op, arg, karg, srcs, dtype, shape): the node, built once per key"},
    {"binary_node", (PyCFunction)(void (*)(void))py_binary_node, METH_FASTCALL,
     "binary_node(op, x, y, dtype): BINARY op of two nodes of one shape (checked by the caller)"},
    {"unary_node", (PyCFunction)(void (*)(void))py_unary_node, METH_FASTCALL,
     "unary_node(op, x): UNARY op keeping x's dtype"},
    {"file_unfiled", py_file_unfiled, METH_NOARGS, "no-op: nodes are filed as they are built"},
    {"walk", py_walk, METH_O, "walk(roots) -> (nodes, items, leaves, root_numbers)"},
    {"table_size", py_table_size, METH_NOARGS, "live interned nodes"},
    {NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "_native", "The lazy graph's node table and signature walk.", -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    if (PyType_Ready(&NodeType) < 0 || PyType_Ready(&PendingType) < 0)
        return NULL;
    table = PyDict_New();
    float_tag = PyUnicode_InternFromString("f");
    binary_op = PyUnicode_InternFromString("BINARY");
    unary_op = PyUnicode_InternFromString("UNARY");
    pending = PyObject_New(PendingObject, &PendingType);
    if (table == NULL || float_tag == NULL || binary_op == NULL || unary_op == NULL ||
        pending == NULL)
        return NULL;
    pending->count = 0;
    PyObject *module = PyModule_Create(&native_module);
    if (module == NULL)
        return NULL;
    Py_INCREF(&NodeType);
    if (PyModule_AddObject(module, "Node", (PyObject *)&NodeType) < 0)
        return NULL;
    Py_INCREF(pending);
    if (PyModule_AddObject(module, "pending", (PyObject *)pending) < 0)
        return NULL;
    return module;
}
