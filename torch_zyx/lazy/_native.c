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
 *   signature(roots, inline_floats)      the schedule cache's key (kernelize.GraphSignature),
 *                                        a byte string (nodes_py.signature)
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

#include <math.h>

typedef struct {
    PyObject_HEAD
    PyObject *op, *arg, *karg, *srcs, *dtype, *shape;
    PyObject *key; /* its key in the table */
    Py_hash_t hash; /* the key's hash (tuples do not keep theirs) */
    PyObject *weakreflist;
    /* The signature walk's state: the node's number ``walk_number`` in the walk ``walk`` (no
     * dict of positions), and the numbers of its op, keyed arg, dtype and shape in
     * ``field_numbers`` once a walk has asked for them (0: not yet). */
    unsigned long long walk;
    Py_ssize_t walk_number;
    long long op_id, karg_id, dtype_id, shape_id;
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

/* The table's lookups with the key's hash computed once: a node's key is hashed when the node
 * is looked up or built, and that hash serves its entry's insertion and removal (a nested
 * tuple's hash is computed afresh each time it is asked for). CPython 3.13 made these private
 * functions internal: there the plain ones hash again. */
#if PY_VERSION_HEX < 0x030D0000
#define TABLE_GET(key, hash) _PyDict_GetItem_KnownHash(table, (key), (hash))
#define TABLE_SET(key, value, hash) _PyDict_SetItem_KnownHash(table, (key), (value), (hash))
#define TABLE_DEL(key, hash) _PyDict_DelItem_KnownHash(table, (key), (hash))
#else
#define TABLE_GET(key, hash) PyDict_GetItemWithError(table, (key))
#define TABLE_SET(key, value, hash) PyDict_SetItem(table, (key), (value))
#define TABLE_DEL(key, hash) PyDict_DelItem(table, (key))
#endif

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

/* The node (op, arg, srcs, dtype, shape) with ``arg`` keyed as ``karg`` (a new reference):
 * the live one of that key, or a new one entered in the table. */
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
    Py_hash_t hash = PyObject_Hash(key);
    if (hash == -1) {
        Py_DECREF(key);
        return NULL;
    }
    PyObject *address = TABLE_GET(key, hash);
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
    node->hash = hash;
    node->weakreflist = NULL;
    node->walk = 0;
    node->walk_number = 0;
    node->op_id = node->karg_id = node->dtype_id = node->shape_id = 0;
    address = PyLong_FromVoidPtr(node);
    if (address == NULL || TABLE_SET(key, address, hash) < 0) {
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

/* The node (op, arg) of the sources ``srcs`` (a tuple it steals; NULL passes its error on),
 * its arg keyed as it is (no floats in it). */
static PyObject *
node_of(PyObject *op, PyObject *arg, PyObject *srcs, PyObject *dtype, PyObject *shape)
{
    if (srcs == NULL)
        return NULL;
    PyObject *node = intern_node(op, arg, arg, srcs, dtype, shape);
    Py_DECREF(srcs);
    return node;
}

/* Whether a function got its ``wanted`` arguments; raises TypeError(usage) if not. */
static int
arity(Py_ssize_t nargs, Py_ssize_t wanted, const char *usage)
{
    if (nargs != wanted) {
        PyErr_SetString(PyExc_TypeError, usage);
        return 0;
    }
    return 1;
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
        PyObject *address = TABLE_GET(self->key, self->hash);
        if (address != NULL && PyLong_AsVoidPtr(address) == (void *)self)
            TABLE_DEL(self->key, self->hash);
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
    if (!arity(nargs, 6, "intern(op, arg, karg, srcs, dtype, shape)"))
        return NULL;
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
static PyObject *buffer_op, *random_op, *const_op, *scalar_tag, *kind_name, *float_kind;

static PyObject *
py_binary_node(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!arity(nargs, 4, "binary_node(op, x, y, dtype)"))
        return NULL;
    PyObject *op = args[0], *x = args[1], *y = args[2], *dtype = args[3];
    if (!check_node(x) || !check_node(y))
        return NULL;
    return node_of(binary_op, op, PyTuple_Pack(2, x, y), dtype, ((NodeObject *)x)->shape);
}

static PyObject *
py_unary_node(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!arity(nargs, 2, "unary_node(op, x)") || !check_node(args[1]))
        return NULL;
    NodeObject *x = (NodeObject *)args[1];
    return node_of(unary_op, args[0], PyTuple_Pack(1, x), x->dtype, x->shape);
}

/* ------------------------------------------------------------------ constructors
 * graph.py's hot constructors (nodes_py.py has their Python reference): the same checks,
 * simplifications and keys. ``configure`` gives them graph.py's op sets, the bool dtype and
 * graph.const (a CAST of a constant is a constant). */

static PyObject *unary_set, *binary_set, *compare_set, *reduce_set, *bool_dtype, *const_fn;
static PyObject *where_op, *cast_op, *reduce_op, *reshape_op, *expand_op, *shrink_op, *isnan_name;

static PyObject *
py_configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!arity(nargs, 6, "configure(unary_ops, binary_ops, compare_ops, reduce_ops, bool, const)"))
        return NULL;
    PyObject **slots[] = {&unary_set, &binary_set, &compare_set, &reduce_set, &bool_dtype, &const_fn};
    for (int i = 0; i < 6; i++) {
        Py_INCREF(args[i]);
        Py_XSETREF(*slots[i], args[i]);
    }
    Py_RETURN_NONE;
}

static int
configured(void)
{
    if (const_fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "torch_zyx.lazy._native: configure() was not called");
        return 0;
    }
    return 1;
}

/* Whether a constructor got its ``wanted`` arguments and configure() ran; raises if not. */
static int
takes(Py_ssize_t nargs, Py_ssize_t wanted, const char *usage)
{
    return arity(nargs, wanted, usage) && configured();
}

/* Raise AssertionError(detail), as graph.py's constructors assert their invariants; steals
 * ``detail`` (NULL: the error of building it stands). Returns NULL. */
static PyObject *
fail_assert(PyObject *detail)
{
    if (detail != NULL) {
        /* (one argument, as ``assert ..., detail``: a tuple given as is would be the args) */
        PyObject *error = PyObject_CallOneArg(PyExc_AssertionError, detail);
        Py_DECREF(detail);
        if (error != NULL) {
            PyErr_SetObject(PyExc_AssertionError, error);
            Py_DECREF(error);
        }
    }
    return NULL;
}

/* ``x`` as a node, once ``op`` is found in ``ops`` (else AssertionError, as graph.py's asserts);
 * NULL with an error set otherwise. */
static NodeObject *
op_and_node(PyObject *ops, PyObject *op, PyObject *x)
{
    int known = PySet_Contains(ops, op);
    if (known <= 0) {
        if (known == 0)
            fail_assert(Py_NewRef(op));
        return NULL;
    }
    return check_node(x) ? (NodeObject *)x : NULL;
}

static int
is_op(NodeObject *node, PyObject *name)
{
    return node->op == name || PyUnicode_Compare(node->op, name) == 0;
}

/* ``x`` as a tuple (a new reference): shapes may come as lists or torch.Size. */
static PyObject *
as_tuple(PyObject *x)
{
    if (PyTuple_CheckExact(x)) {
        Py_INCREF(x);
        return x;
    }
    return PySequence_Tuple(x);
}

/* CONST ``x`` at another shape (its value is already of its dtype). */
static PyObject *
const_like(NodeObject *x, PyObject *shape)
{
    static PyObject *empty;
    if (empty == NULL && (empty = PyTuple_New(0)) == NULL)
        return NULL;
    return intern_node(const_op, x->arg, x->karg, empty, x->dtype, shape);
}

/* Movement ``op`` (arg ``arg``) of ``x`` to ``shape``: a constant is the constant at ``shape``. */
static PyObject *
movement(PyObject *op, PyObject *arg, NodeObject *x, PyObject *shape)
{
    if (is_op(x, const_op))
        return const_like(x, shape);
    return node_of(op, arg, PyTuple_Pack(1, x), x->dtype, shape);
}

/* ``fn(x, shape)`` for the constructors called as f(x, shape): checks the node, takes the shape
 * as a tuple (it may come as a list or torch.Size). */
static PyObject *
call_with_shape(PyObject *const *args, Py_ssize_t nargs, const char *usage,
                PyObject *(*fn)(NodeObject *, PyObject *))
{
    if (!arity(nargs, 2, usage) || !check_node(args[0]))
        return NULL;
    PyObject *shape = as_tuple(args[1]);
    if (shape == NULL)
        return NULL;
    PyObject *node = fn((NodeObject *)args[0], shape);
    Py_DECREF(shape);
    return node;
}

static PyObject *
py_const_like(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return call_with_shape(args, nargs, "const_like(x, shape)", const_like);
}

static PyObject *
py_unary(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!takes(nargs, 2, "unary(op, x)"))
        return NULL;
    PyObject *op = args[0];
    NodeObject *x = op_and_node(unary_set, op, args[1]);
    if (x == NULL)
        return NULL;
    int isnan_op = PyUnicode_Compare(op, isnan_name) == 0;
    return node_of(unary_op, op, PyTuple_Pack(1, x), isnan_op ? bool_dtype : x->dtype, x->shape);
}

static PyObject *
py_binary(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!takes(nargs, 3, "binary(op, x, y)"))
        return NULL;
    PyObject *op = args[0];
    if (!check_node(args[1]) || !check_node(args[2]))
        return NULL;
    NodeObject *x = (NodeObject *)args[1], *y = (NodeObject *)args[2];
    int known = PySet_Contains(binary_set, op);
    if (known < 0)
        return NULL;
    int same_shape = known ? PyObject_RichCompareBool(y->shape, x->shape, Py_EQ) : 0;
    if (same_shape < 0)
        return NULL;
    if (!known || !same_shape || y->dtype != x->dtype) {
        return fail_assert(PyTuple_Pack(3, op, x, y));
    }
    int compare = PySet_Contains(compare_set, op);
    if (compare < 0)
        return NULL;
    return node_of(binary_op, op, PyTuple_Pack(2, x, y), compare ? bool_dtype : x->dtype, x->shape);
}

static PyObject *
py_where(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!takes(nargs, 3, "where(cond, x, y)"))
        return NULL;
    for (int i = 0; i < 3; i++)
        if (!check_node(args[i]))
            return NULL;
    NodeObject *cond = (NodeObject *)args[0], *x = (NodeObject *)args[1], *y = (NodeObject *)args[2];
    int shapes = PyObject_RichCompareBool(cond->shape, x->shape, Py_EQ);
    if (shapes > 0)
        shapes = PyObject_RichCompareBool(x->shape, y->shape, Py_EQ);
    if (shapes < 0)
        return NULL;
    if (!shapes || x->dtype != y->dtype || cond->dtype != bool_dtype) {
        return fail_assert(PyTuple_Pack(3, cond, x, y));
    }
    return node_of(where_op, Py_None, PyTuple_Pack(3, cond, x, y), x->dtype, x->shape);
}

static PyObject *
py_cast(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!takes(nargs, 2, "cast(x, dtype)") || !check_node(args[0]))
        return NULL;
    NodeObject *x = (NodeObject *)args[0];
    PyObject *dtype = args[1];
    if (x->dtype == dtype) {
        Py_INCREF(x);
        return (PyObject *)x;
    }
    if (is_op(x, const_op))
        return PyObject_CallFunctionObjArgs(const_fn, x->arg, dtype, x->shape, NULL);
    return node_of(cast_op, dtype, PyTuple_Pack(1, x), dtype, x->shape);
}

static PyObject *
py_reduce(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!takes(nargs, 3, "reduce(op, x, axes)"))
        return NULL;
    PyObject *op = args[0];
    NodeObject *x = op_and_node(reduce_set, op, args[1]);
    if (x == NULL)
        return NULL;
    Py_ssize_t ndim = PyTuple_GET_SIZE(x->shape);
    PyObject *axes_seq = PySequence_Fast(args[2], "reduce() axes must be a sequence");
    if (axes_seq == NULL)
        return NULL;
    /* Axes modulo the rank, each once: a mask over the (few) axes. */
    char reduced[64] = {0};
    if (ndim > 64) {
        Py_DECREF(axes_seq);
        PyErr_SetString(PyExc_ValueError, "reduce() of more than 64 axes");
        return NULL;
    }
    Py_ssize_t n_axes = 0;
    for (Py_ssize_t i = 0; ndim > 0 && i < PySequence_Fast_GET_SIZE(axes_seq); i++) {
        Py_ssize_t axis = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(axes_seq, i), NULL);
        if (axis == -1 && PyErr_Occurred()) {
            Py_DECREF(axes_seq);
            return NULL;
        }
        axis = ((axis % ndim) + ndim) % ndim;
        n_axes += !reduced[axis];
        reduced[axis] = 1;
    }
    Py_DECREF(axes_seq);
    if (n_axes == 0) {
        Py_INCREF(x);
        return (PyObject *)x;
    }
    PyObject *axes = PyTuple_New(n_axes), *shape = PyTuple_New(ndim);
    if (axes == NULL || shape == NULL)
        goto fail;
    for (Py_ssize_t i = 0, k = 0; i < ndim; i++) {
        PyObject *size = reduced[i] ? PyLong_FromLong(1) : PyTuple_GET_ITEM(x->shape, i);
        if (reduced[i]) {
            PyObject *axis = PyLong_FromSsize_t(i);
            if (size == NULL || axis == NULL) {
                Py_XDECREF(size);
                Py_XDECREF(axis);
                goto fail;
            }
            PyTuple_SET_ITEM(axes, k++, axis);
        } else {
            Py_INCREF(size);
        }
        PyTuple_SET_ITEM(shape, i, size);
    }
    PyObject *arg = PyTuple_Pack(2, op, axes);
    PyObject *node = arg == NULL ? NULL : node_of(reduce_op, arg, PyTuple_Pack(1, x), x->dtype, shape);
    Py_XDECREF(arg);
    Py_DECREF(axes);
    Py_DECREF(shape);
    return node;
fail:
    Py_XDECREF(axes);
    Py_XDECREF(shape);
    return NULL;
}

/* The product of a shape's sizes; on failure -1 with an error set (a shape with negative sizes
   has a negative product too: callers tell the two apart by PyErr_Occurred). */
static Py_ssize_t
shape_numel(PyObject *shape)
{
    Py_ssize_t numel = 1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(shape); i++) {
        Py_ssize_t size = PyNumber_AsSsize_t(PyTuple_GET_ITEM(shape, i), PyExc_OverflowError);
        if (size == -1 && PyErr_Occurred())
            return -1;
        numel *= size;
    }
    return numel;
}

static PyObject *
reshape_tuple(NodeObject *x, PyObject *shape)
{
    for (;;) {
        int same = PyObject_RichCompareBool(shape, x->shape, Py_EQ);
        if (same != 0) {
            if (same < 0)
                return NULL;
            Py_INCREF(x);
            return (PyObject *)x;
        }
        Py_ssize_t want = shape_numel(shape), have = shape_numel(x->shape);
        if ((want == -1 || have == -1) && PyErr_Occurred())
            return NULL;
        if (want != have) {
            return fail_assert(PyTuple_Pack(2, x->shape, shape));
        }
        if (!is_op(x, reshape_op))
            break;
        x = (NodeObject *)PyTuple_GET_ITEM(x->srcs, 0); /* a reshape of a reshape */
    }
    return movement(reshape_op, shape, x, shape);
}

static PyObject *
py_reshape(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return call_with_shape(args, nargs, "reshape(x, shape)", reshape_tuple);
}

static PyObject *
expand_tuple(NodeObject *x, PyObject *shape)
{
    int same = PyObject_RichCompareBool(shape, x->shape, Py_EQ);
    if (same != 0) {
        if (same < 0)
            return NULL;
        Py_INCREF(x);
        return (PyObject *)x;
    }
    /* Each axis keeps its size or grows from 1. */
    int valid = PyTuple_GET_SIZE(shape) == PyTuple_GET_SIZE(x->shape);
    for (Py_ssize_t i = 0; valid && i < PyTuple_GET_SIZE(shape); i++) {
        PyObject *size = PyTuple_GET_ITEM(shape, i), *old = PyTuple_GET_ITEM(x->shape, i);
        int equal = PyObject_RichCompareBool(size, old, Py_EQ);
        if (equal < 0)
            return NULL;
        if (!equal) {
            Py_ssize_t old_size = PyNumber_AsSsize_t(old, NULL);
            if (old_size == -1 && PyErr_Occurred())
                return NULL;
            valid = old_size == 1;
        }
    }
    if (!valid)
        return fail_assert(PyTuple_Pack(2, x->shape, shape));
    return movement(expand_op, shape, x, shape);
}

static PyObject *
py_expand(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return call_with_shape(args, nargs, "expand(x, shape)", expand_tuple);
}

static PyObject *
py_shrink(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!arity(nargs, 2, "shrink(x, bounds)") || !check_node(args[0]))
        return NULL;
    NodeObject *x = (NodeObject *)args[0];
    PyObject *given = PySequence_Fast(args[1], "shrink() bounds must be a sequence");
    if (given == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(given);
    PyObject *bounds = PyTuple_New(n), *shape = PyTuple_New(n), *node = NULL;
    int whole = 1;
    if (bounds == NULL || shape == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PySequence_Fast(PySequence_Fast_GET_ITEM(given, i), "shrink() bound");
        if (pair == NULL)
            goto done;
        if (PySequence_Fast_GET_SIZE(pair) != 2) {
            Py_DECREF(pair);
            PyErr_SetString(PyExc_ValueError, "shrink() bounds are (begin, end) pairs");
            goto done;
        }
        Py_ssize_t begin = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(pair, 0), NULL);
        Py_ssize_t end = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(pair, 1), NULL);
        Py_DECREF(pair);
        if (PyErr_Occurred())
            goto done;
        PyObject *bound = Py_BuildValue("(nn)", begin, end);
        PyObject *size = PyLong_FromSsize_t(end - begin);
        if (bound == NULL || size == NULL) {
            Py_XDECREF(bound);
            Py_XDECREF(size);
            goto done;
        }
        PyTuple_SET_ITEM(bounds, i, bound);
        PyTuple_SET_ITEM(shape, i, size);
        if (whole) {
            Py_ssize_t old = i < PyTuple_GET_SIZE(x->shape)
                ? PyNumber_AsSsize_t(PyTuple_GET_ITEM(x->shape, i), NULL) : -1;
            if (old == -1 && PyErr_Occurred())
                goto done;
            whole = begin == 0 && end == old;
        }
    }
    if (whole) {
        Py_INCREF(x);
        node = (PyObject *)x;
    } else {
        node = movement(shrink_op, bounds, x, shape);
    }
done:
    Py_DECREF(given);
    Py_XDECREF(bounds);
    Py_XDECREF(shape);
    return node;
}

static PyObject *
py_file_unfiled(PyObject *module, PyObject *unused)
{
    /* Nothing waits to be filed here: every node enters the table as it is built. */
    Py_RETURN_NONE;
}

/* The signature's key is a byte string of 64-bit numbers (nodes_py.signature says what it
 * encodes): equal strings are equal structures, a bytes object keeps its hash, and comparing
 * two is one memcmp. Values (ops, keyed args, dtypes, shapes) are written as their numbers in
 * ``field_numbers``: each distinct value gets the next number, once. The table is emptied when
 * it grows past FIELD_NUMBERS_MAX; numbers are never given twice, so a value seen again after
 * that only gets a new one (the same structure then misses the schedule cache once). */
static PyObject *field_numbers; /* value -> PyLong number */
static long long next_field_number = 1;
static unsigned long long walk_count; /* the last walk that numbered in nodes (NodeObject.walk) */
/* Whether a walk numbering in nodes is under way. A walk started meanwhile (the garbage
 * collector can run a finalizer, and through it another thread, at any allocation of a walk)
 * numbers in a dict of its own instead, so it cannot overwrite the other's numbers. */
static int numbering_in_nodes;
#define FIELD_NUMBERS_MAX (1 << 16)

/* The numbers of the values numbered last, by the values' addresses: a node's shape is often
 * its source's very object, and its op and dtype always are shared objects. Each entry holds
 * its value, so no other object can take that address while the entry stands. */
#define RECENT_FIELDS 64
static struct {
    PyObject *value;
    long long number;
} recent_fields[RECENT_FIELDS];

/* ``value``'s number in ``field_numbers`` (given now if it has none); 0 with an error set. */
static long long
field_number(PyObject *value)
{
    size_t slot = ((size_t)value >> 4) % RECENT_FIELDS;
    if (recent_fields[slot].value == value)
        return recent_fields[slot].number;
    long long result;
    PyObject *number = PyDict_GetItemWithError(field_numbers, value);
    if (number != NULL) {
        result = PyLong_AsLongLong(number);
        if (result == -1 && PyErr_Occurred())
            return 0;
    } else {
        if (PyErr_Occurred())
            return 0;
        if (PyDict_GET_SIZE(field_numbers) >= FIELD_NUMBERS_MAX)
            PyDict_Clear(field_numbers);
        number = PyLong_FromLongLong(next_field_number);
        if (number == NULL || PyDict_SetItem(field_numbers, value, number) < 0) {
            Py_XDECREF(number);
            return 0;
        }
        Py_DECREF(number);
        result = next_field_number++;
    }
    Py_INCREF(value);
    Py_XSETREF(recent_fields[slot].value, value);
    recent_fields[slot].number = result;
    return result;
}

/* The numbers of ``node``'s op, dtype and shape (kept in the node); 0 on error. */
static int
number_fields(NodeObject *node)
{
    if (node->op_id != 0)
        return 1;
    long long op = field_number(node->op), dtype = op ? field_number(node->dtype) : 0;
    long long shape = dtype ? field_number(node->shape) : 0;
    if (shape == 0)
        return 0;
    node->op_id = op;
    node->dtype_id = dtype;
    node->shape_id = shape;
    return 1;
}

/* A growing array of 64-bit numbers: the key being written. */
typedef struct {
    long long *data;
    Py_ssize_t size, capacity;
} Words;

static int
put(Words *words, long long value)
{
    if (words->size == words->capacity) {
        Py_ssize_t capacity = words->capacity ? 2 * words->capacity : 256;
        long long *data = PyMem_Realloc(words->data, capacity * sizeof(long long));
        if (data == NULL) {
            PyErr_NoMemory();
            return 0;
        }
        words->data = data;
        words->capacity = capacity;
    }
    words->data[words->size++] = value;
    return 1;
}

/* Leaf abstraction of ``signature``: what is kept of each leaf, and what it binds. */
typedef struct {
    PyObject *buffers, *buffer_pos, *random_args, *scalar_dtypes, *scalar_values, *scalar_slot;
    PyObject *inline_floats;
} Leaves;

/* How a leaf's arg is written in the key (nodes_py.LEAF_*). */
enum { ARG_KEYED = 0, ARG_BUFFER = 1, ARG_RANDOM = 2, ARG_SCALAR = 3 };

/* Writes ``node``'s keyed arg as (ARG_KEYED, its number). Only for inner nodes and leaves kept
 * as they are: a buffer handle or a scalar parameter's value never enters ``field_numbers``
 * (that would keep the buffer alive, or number every learning rate). */
static int
put_keyed_arg(NodeObject *node, Words *words)
{
    if (node->karg_id == 0 && (node->karg_id = field_number(node->karg)) == 0)
        return 0;
    return put(words, ARG_KEYED) && put(words, node->karg_id);
}

/* Whether the CONST ``node`` is a run-time scalar parameter: a float dtype and a finite value
 * outside ``inline_floats`` (nodes_py.is_scalar_param). -1 on error. */
static int
is_scalar_param(NodeObject *node, PyObject *inline_floats)
{
    PyObject *kind = PyObject_GetAttr(node->dtype, kind_name);
    if (kind == NULL)
        return -1;
    int is_float = PyObject_RichCompareBool(kind, float_kind, Py_EQ);
    Py_DECREF(kind);
    if (is_float <= 0)
        return is_float;
    int inline_value = PySequence_Contains(inline_floats, node->arg);
    if (inline_value != 0)
        return inline_value < 0 ? -1 : 0;
    double value = PyFloat_AsDouble(node->arg);
    if (value == -1.0 && PyErr_Occurred())
        return -1;
    return isfinite(value) ? 1 : 0;
}

/* Writes leaf ``node``'s arg as (how, number) into ``words``: its position among the buffers,
 * random parameters or scalar groups, recorded in ``leaves``, or its keyed arg's number. */
static int
put_leaf_arg(NodeObject *node, Leaves *leaves, Words *words)
{
    if (node->op == buffer_op || PyUnicode_Compare(node->op, buffer_op) == 0) {
        PyObject *handle_id = PyLong_FromVoidPtr(node->arg); /* buffers by identity */
        if (handle_id == NULL)
            return 0;
        PyObject *position = PyDict_GetItemWithError(leaves->buffer_pos, handle_id);
        Py_ssize_t number;
        if (position != NULL) {
            number = PyLong_AsSsize_t(position);
        } else {
            number = PyList_GET_SIZE(leaves->buffers);
            position = PyErr_Occurred() ? NULL : PyLong_FromSsize_t(number);
            if (position == NULL || PyDict_SetItem(leaves->buffer_pos, handle_id, position) < 0 ||
                PyList_Append(leaves->buffers, node->arg) < 0) {
                Py_DECREF(handle_id);
                Py_XDECREF(position);
                return 0;
            }
            Py_DECREF(position);
        }
        Py_DECREF(handle_id);
        return put(words, ARG_BUFFER) && put(words, number);
    }
    if (node->op == random_op || PyUnicode_Compare(node->op, random_op) == 0) {
        Py_ssize_t end = PyList_GET_SIZE(leaves->random_args);
        if (PyList_SetSlice(leaves->random_args, end, end, node->arg) < 0)
            return 0;
        return put(words, ARG_RANDOM) && put(words, end);
    }
    int scalar = 0;
    if (node->op == const_op || PyUnicode_Compare(node->op, const_op) == 0) {
        scalar = is_scalar_param(node, leaves->inline_floats);
        if (scalar < 0)
            return 0;
    }
    if (!scalar)
        return put_keyed_arg(node, words);
    Py_ssize_t n_groups = PyList_GET_SIZE(leaves->scalar_dtypes), group = 0;
    while (group < n_groups && PyList_GET_ITEM(leaves->scalar_dtypes, group) != node->dtype)
        group++;
    if (group == n_groups) {
        PyObject *values = PyList_New(0);
        if (values == NULL || PyList_Append(leaves->scalar_dtypes, node->dtype) < 0 ||
            PyList_Append(leaves->scalar_values, values) < 0) {
            Py_XDECREF(values);
            return 0;
        }
        Py_DECREF(values);
    }
    PyObject *values = PyList_GET_ITEM(leaves->scalar_values, group);
    PyObject *node_id = PyLong_FromVoidPtr(node);
    PyObject *slot = node_id ? PyTuple_New(2) : NULL;
    if (slot != NULL) {
        PyTuple_SET_ITEM(slot, 0, PyLong_FromSsize_t(group));
        PyTuple_SET_ITEM(slot, 1, PyLong_FromSsize_t(PyList_GET_SIZE(values)));
    }
    if (slot == NULL || PyTuple_GET_ITEM(slot, 0) == NULL || PyTuple_GET_ITEM(slot, 1) == NULL ||
        PyDict_SetItem(leaves->scalar_slot, node_id, slot) < 0 ||
        PyList_Append(values, node->arg) < 0) {
        Py_XDECREF(node_id);
        Py_XDECREF(slot);
        return 0;
    }
    Py_DECREF(node_id);
    Py_DECREF(slot);
    return put(words, ARG_SCALAR) && put(words, group);
}

/* One walk's numbering: ``nodes`` in the order numbered, by marks in the nodes (``mark``) or,
 * for a walk started while another is under way, in ``positions`` (node -> number). */
typedef struct {
    PyObject *nodes;
    unsigned long long mark;
    PyObject *positions;
} Walk;

/* The number of ``node`` in the walk, numbering it (and queueing it) when it is new; -1 on
 * error. */
static Py_ssize_t
number_of(NodeObject *node, Walk *walk)
{
    Py_ssize_t number = PyList_GET_SIZE(walk->nodes);
    if (walk->positions == NULL) {
        if (node->walk == walk->mark)
            return node->walk_number;
        if (PyList_Append(walk->nodes, (PyObject *)node) < 0)
            return -1;
        node->walk = walk->mark;
        node->walk_number = number;
        return number;
    }
    PyObject *known = PyDict_GetItemWithError(walk->positions, (PyObject *)node);
    if (known != NULL)
        return PyLong_AsSsize_t(known);
    if (PyErr_Occurred())
        return -1;
    PyObject *position = PyLong_FromSsize_t(number);
    if (position == NULL || PyDict_SetItem(walk->positions, (PyObject *)node, position) < 0 ||
        PyList_Append(walk->nodes, (PyObject *)node) < 0) {
        Py_XDECREF(position);
        return -1;
    }
    Py_DECREF(position);
    return number;
}

/* Writes node ``node`` of the walk into ``words``, numbering its sources. */
static int
put_node(NodeObject *node, Walk *walk, Leaves *leaves, Words *words)
{
    if (!number_fields(node) || !put(words, node->op_id))
        return 0;
    Py_ssize_t n_srcs = PyTuple_GET_SIZE(node->srcs);
    if (n_srcs == 0) {
        if (!put_leaf_arg(node, leaves, words))
            return 0;
    } else if (!put_keyed_arg(node, words)) {
        return 0;
    }
    if (!put(words, node->dtype_id) || !put(words, node->shape_id) || !put(words, n_srcs))
        return 0;
    for (Py_ssize_t j = 0; j < n_srcs; j++) {
        PyObject *src = PyTuple_GET_ITEM(node->srcs, j);
        if (!check_node(src))
            return 0;
        Py_ssize_t number = number_of((NodeObject *)src, walk);
        if (number < 0 || !put(words, number))
            return 0;
    }
    return 1;
}

/* signature(roots, inline_floats) -> (nodes, key, buffers, random_args, scalar_dtypes,
 * scalar_values, scalar_slot): kernelize.GraphSignature, computed in one walk (nodes_py.py's
 * ``signature`` says what each part is). */
static PyObject *
py_signature(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!arity(nargs, 2, "signature(roots, inline_floats)"))
        return NULL;
    Leaves leaves = {PyList_New(0), PyDict_New(), PyList_New(0), PyList_New(0), PyList_New(0),
                     PyDict_New(), args[1]};
    PyObject *nodes = PyList_New(0);
    PyObject *fast = PySequence_Fast(args[0], "signature() takes a sequence of nodes");
    PyObject *key = NULL, *result = NULL;
    Words words = {NULL, 0, 0};
    int in_nodes = !numbering_in_nodes;
    Walk walk = {nodes, 0, in_nodes ? NULL : PyDict_New()};
    if (leaves.buffers == NULL || leaves.buffer_pos == NULL || leaves.random_args == NULL ||
        leaves.scalar_dtypes == NULL || leaves.scalar_values == NULL ||
        leaves.scalar_slot == NULL || nodes == NULL || fast == NULL ||
        (!in_nodes && walk.positions == NULL))
        goto done;
    if (in_nodes) {
        numbering_in_nodes = 1;
        walk.mark = ++walk_count;
    }
    /* The header: the number of roots and theirs (nodes_py.signature); the node count last. */
    Py_ssize_t n_roots = PySequence_Fast_GET_SIZE(fast);
    if (!put(&words, n_roots))
        goto done;
    for (Py_ssize_t i = 0; i < n_roots; i++) {
        PyObject *root = PySequence_Fast_GET_ITEM(fast, i);
        Py_ssize_t number = check_node(root) ? number_of((NodeObject *)root, &walk) : -1;
        if (number < 0 || !put(&words, number))
            goto done;
    }
    Py_ssize_t count_at = words.size;
    if (!put(&words, 0))
        goto done;
    /* The list grows while it is walked: the loop also visits the nodes it discovers. */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes); i++)
        if (!put_node((NodeObject *)PyList_GET_ITEM(nodes, i), &walk, &leaves, &words))
            goto done;
    words.data[count_at] = PyList_GET_SIZE(nodes);
    key = PyBytes_FromStringAndSize((const char *)words.data, words.size * sizeof(long long));
    if (key == NULL)
        goto done;
    result = PyTuple_Pack(7, nodes, key, leaves.buffers, leaves.random_args, leaves.scalar_dtypes,
                          leaves.scalar_values, leaves.scalar_slot);
done:
    if (in_nodes)
        numbering_in_nodes = 0;
    Py_XDECREF(walk.positions);
    PyMem_Free(words.data);
    Py_XDECREF(leaves.buffers);
    Py_XDECREF(leaves.buffer_pos);
    Py_XDECREF(leaves.random_args);
    Py_XDECREF(leaves.scalar_dtypes);
    Py_XDECREF(leaves.scalar_values);
    Py_XDECREF(leaves.scalar_slot);
    Py_XDECREF(nodes);
    Py_XDECREF(fast);
    Py_XDECREF(key);
    return result;
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
    {"configure", (PyCFunction)(void (*)(void))py_configure, METH_FASTCALL,
     "configure(unary_ops, binary_ops, compare_ops, reduce_ops, bool, const)"},
    {"const_like", (PyCFunction)(void (*)(void))py_const_like, METH_FASTCALL,
     "const_like(x, shape): the CONST x at another shape"},
    {"unary", (PyCFunction)(void (*)(void))py_unary, METH_FASTCALL, "graph.unary"},
    {"binary", (PyCFunction)(void (*)(void))py_binary, METH_FASTCALL, "graph.binary"},
    {"where", (PyCFunction)(void (*)(void))py_where, METH_FASTCALL, "graph.where"},
    {"cast", (PyCFunction)(void (*)(void))py_cast, METH_FASTCALL, "graph.cast"},
    {"reduce", (PyCFunction)(void (*)(void))py_reduce, METH_FASTCALL, "graph.reduce"},
    {"reshape", (PyCFunction)(void (*)(void))py_reshape, METH_FASTCALL, "graph.reshape"},
    {"expand", (PyCFunction)(void (*)(void))py_expand, METH_FASTCALL, "graph.expand"},
    {"shrink", (PyCFunction)(void (*)(void))py_shrink, METH_FASTCALL, "graph.shrink"},
    {"file_unfiled", py_file_unfiled, METH_NOARGS, "no-op: nodes are filed as they are built"},
    {"signature", (PyCFunction)(void (*)(void))py_signature, METH_FASTCALL,
     "signature(roots, inline_floats): kernelize.GraphSignature's parts"},
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
    /* The strings compared or keyed with, interned once. */
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {
        {&float_tag, "f"}, {&float_kind, "f"}, {&kind_name, "kind"}, {&scalar_tag, "scalar"},
        {&isnan_name, "isnan"}, {&binary_op, "BINARY"}, {&unary_op, "UNARY"},
        {&buffer_op, "BUFFER"}, {&random_op, "RANDOM"}, {&const_op, "CONST"}, {&where_op, "WHERE"},
        {&cast_op, "CAST"}, {&reduce_op, "REDUCE"}, {&reshape_op, "RESHAPE"},
        {&expand_op, "EXPAND"}, {&shrink_op, "SHRINK"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL)
            return NULL;
    table = PyDict_New();
    field_numbers = PyDict_New();
    if (field_numbers == NULL)
        return NULL;
    pending = PyObject_New(PendingObject, &PendingType);
    if (table == NULL || pending == NULL)
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
