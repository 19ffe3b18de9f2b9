"""distop's errors arrive as distop.Error, with distop's message, on every rank: never a hang."""

import pytest
import torch

import distop
import distop.torch as dt


def test_error_is_a_python_exception_type():
    assert issubclass(distop.Error, RuntimeError)


def test_a_block_that_does_not_fit_is_an_error_everywhere(world_size, rank):
    P = world_size
    gather = dt.Gather(distop.Partition.world([P, 1]), root=0)
    x = torch.zeros(2, 3 if rank != P - 1 else 4, dtype=torch.float64)
    if P == 1:
        x = torch.zeros(2, 4, dtype=torch.float64)
        gather(x)  # alone, any shape is the whole tensor
        return
    with pytest.raises(distop.Error, match=r"Gather.*rank"):
        gather(x)
    # The module still works afterwards on every rank.
    y = gather(torch.zeros(1, 3, dtype=torch.float64))
    assert list(y.shape) == ([P, 3] if rank == 0 else [0, 0])


def test_unsupported_or_mismatched_dtypes(world_size, rank):
    P = world_size
    ag = dt.AllGather(distop.Partition.world([P, 1]), [0])
    with pytest.raises(distop.Error, match="neither float32 nor float64"):
        ag(torch.zeros(1, 2, dtype=torch.int64))
    if P > 1:
        x = torch.zeros(1, 2, dtype=torch.float32 if rank == 0 else torch.float64)
        with pytest.raises(distop.Error, match="different dtypes"):
            ag(x)


def test_wrong_dimensions(world_size):
    ag = dt.AllGather(distop.Partition.world([world_size, 1]), [0])
    with pytest.raises(distop.Error, match="as many dimensions as the partition"):
        ag(torch.zeros(1, 2, 3, dtype=torch.float64))


def test_bad_partitions(world_size, rank):
    with pytest.raises(distop.Error, match="Partition"):
        distop.Partition.world([world_size + 1])
    if world_size > 1:
        # The ranks pass different partitions.
        with pytest.raises(distop.Error):
            distop.Partition.world([1], [0 if rank == 0 else 1])
        # Broadcast between grids that do not broadcast ([1, P] onto [P, 1]).
        W = distop.Partition.world
        space = distop.TensorSpace([3, world_size], W([1, world_size]))
        with pytest.raises(distop.Error, match="Broadcast"):
            distop._core.broadcast("float64", space, W([world_size, 1]))
    with pytest.raises(distop.Error, match="SumReduce"):
        dt.SumReduce(distop.Partition.world([1]), distop.Partition.world([1, 1]))


def test_prebuilt_operator_with_a_wrong_input(world_size, rank):
    P = world_size
    space = distop.TensorSpace([P, 2], distop.Partition.world([P, 1]))
    op = distop._core.all_gather("float64", space, [0])
    bad = torch.zeros(1, 2 if rank != 0 else 3, dtype=torch.float64)
    with pytest.raises(distop.Error, match="DistTensor|shape") as info:
        dt.apply(op, bad)
    assert "rank" in str(info.value)
    with pytest.raises(distop.Error, match="float32"):
        dt.apply(op, torch.zeros(1, 2, dtype=torch.float32))


def test_halo_widths_beyond_the_neighbour(world_size):
    if world_size < 2:
        pytest.skip("needs a neighbour")
    interior = distop.TensorSpace([world_size, 2], distop.Partition.world([world_size, 1]))
    with pytest.raises(distop.Error, match="HaloExchange"):
        dt.HaloExchange(interior, widths=[[(2, 2)] * world_size, [(0, 0)]])(
            torch.zeros(5, 2, dtype=torch.float64))


def test_a_tensor_in_other_memory_is_an_error_everywhere(world_size, rank):
    # A torch device other than distop.device() on one rank ("meta" stands for a GPU, which this
    # host build refuses the same way): the call's agreement refuses it on every rank.
    assert distop.device() == torch.device("cpu")
    ag = dt.AllGather(distop.Partition.world([world_size, 1]), [0])
    x = torch.zeros(1, 2, dtype=torch.float64, device="meta" if rank == 0 else "cpu")
    with pytest.raises(distop.Error, match="rank 0 passes a tensor in another memory"):
        ag(x)
    assert ag(torch.ones(1, 2, dtype=torch.float64)).shape == (world_size, 2)


class _CudaArray:
    """A DLPack producer that says its float64 entries are on CUDA device 0 (they are host memory
    that is never read): what a torch CUDA tensor hands over."""

    def __init__(self, n):
        import ctypes

        class Device(ctypes.Structure):
            _fields_ = [("type", ctypes.c_int32), ("id", ctypes.c_int32)]

        class DType(ctypes.Structure):
            _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                        ("lanes", ctypes.c_uint16)]

        class Tensor(ctypes.Structure):
            _fields_ = [("data", ctypes.c_void_p), ("device", Device), ("ndim", ctypes.c_int32),
                        ("dtype", DType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                        ("strides", ctypes.c_void_p), ("byte_offset", ctypes.c_uint64)]

        class Managed(ctypes.Structure):
            _fields_ = [("tensor", Tensor), ("ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]

        self._ctypes = ctypes
        self._data = (ctypes.c_double * n)()
        self._shape = (ctypes.c_int64 * 1)(n)
        self._managed = Managed(Tensor(ctypes.cast(self._data, ctypes.c_void_p), Device(2, 0), 1,
                                       DType(2, 64, 1), self._shape, None, 0), None, None)

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, *args, **kwargs):
        ctypes = self._ctypes
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                       ctypes.c_void_p]
        return new(ctypes.addressof(self._managed), b"dltensor", None)


def test_an_array_on_a_gpu_is_refused_by_a_host_build(world_size):
    # Past the agreement (agreed=True), the C++ side checks where the array's memory is.
    op = distop._core.all_gather("float64", distop.TensorSpace(
        [world_size], distop.Partition.world([world_size])), [0])
    with pytest.raises(distop.Error, match="the tensor is on CUDA device 0; this distop build "
                                           "takes tensors in host memory"):
        op.forward(_CudaArray(1), agreed=True)
