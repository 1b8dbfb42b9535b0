"""Device meshes: a communicator's ranks laid out on named dimensions (DP x TP x PP ...), with one
sub-communicator per dimension for the ranks that differ only along it (Communicator.mesh)."""

from __future__ import annotations

import math

from pycoll.dtypes import integer_argument


def mesh_coords(rank, shape):
    """rank's coordinates on a mesh of `shape` (name -> extent), the last dimension varying fastest."""
    coords = {}
    for name in reversed(shape):
        rank, coords[name] = divmod(rank, shape[name])
    return {name: coords[name] for name in shape}


def check_shape(dims, size):
    """dims (name -> extent) as ints, checked against the communicator's size; ValueError/TypeError naming the
    dimension otherwise."""
    if not dims:
        raise ValueError("mesh: give at least one dimension, e.g. comm.mesh(dp=2, tp=2)")
    shape = {}
    for name, extent in dims.items():
        extent = integer_argument(extent, name)
        if extent < 1:
            raise ValueError(f"mesh: dimension {name} must be >= 1, got {extent}")
        shape[name] = extent
    if math.prod(shape.values()) != size:
        described = " x ".join(f"{name}={extent}" for name, extent in shape.items())
        raise ValueError(f"mesh: {described} makes {math.prod(shape.values())} ranks, but the communicator has "
                         f"{size}")
    return shape


class Mesh:
    """This rank's place on a mesh: `mesh["tp"]` is its sub-communicator along dimension tp (the ranks whose
    other coordinates equal this rank's, numbered by their tp coordinate), `mesh.coords` its coordinates
    (name -> index), `mesh.shape` the extents, `mesh.comm` the communicator the mesh was made from."""

    def __init__(self, comm, shape):
        self.comm = comm
        self.shape = dict(shape)
        self.coords = mesh_coords(comm.rank, self.shape)
        strides, stride = {}, 1
        for name in reversed(self.shape):
            strides[name] = stride
            stride *= self.shape[name]
        self._groups = {}
        for name in self.shape:
            # The ranks that differ from this one only along `name` share the rank with that coordinate at 0.
            line = comm.rank - self.coords[name] * strides[name]
            self._groups[name] = comm.split(line, key=self.coords[name])

    @property
    def dims(self):
        return tuple(self.shape)

    def __getitem__(self, name):
        try:
            return self._groups[name]
        except KeyError:
            raise KeyError(f"mesh has no dimension {name!r}; it has {', '.join(self.shape)}") from None

    def __repr__(self):
        shape = ", ".join(f"{name}={extent}" for name, extent in self.shape.items())
        return f"<pycoll.Mesh {shape} coords={self.coords}>"

    def close(self):
        for group in self._groups.values():
            group.close()
