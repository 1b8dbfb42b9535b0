"""Where a rank process mapped its job's shared-memory segments, for the tests that look into them from inside a
rank (shm_fault_worker.py, shm_coll_worker.py): /proc/self/maps lists this process's mappings of the segments
(unlinked, so they can be opened nowhere else), and native/transport/shm_layout.h gives the layout, mirrored
below."""

import ctypes

# native/transport/shm_layout.h (its _Static_asserts pin these offsets).
PAGE = 4096
MAX_SLOT_BYTES = 4 << 20
RING_FIELDS = {"head": (0, 8), "tail": (128, 8), "closed": (256, 4), "status": (260, 4), "failed_rank": (264, 4),
               "desc": (272, 40), "prev": (312, 40), "text": (352, 512)}
FLAG_FIELDS = {"posted": (0, 8), "desc": (8, 40), "prev": (48, 40), "source": (88, 8), "reduced": (128, 8)}
FLAGS_BYTES = 256  # one parity
FRAME_HEADER_BYTES = 104  # native/transport/frame.h: pycoll_frame_header_t


class Segments:
    """Where this process mapped the job's shared-memory segments: rings[(inode, sender)] and areas[inode]
    are addresses of a ring's control page and of a collective area."""

    def __init__(self, size, rank, ring_bytes):
        self.ring_bytes, self.rank = ring_bytes, rank
        unit = PAGE + ring_bytes
        self.rings, self.areas = {}, {}
        area_extent = {}  # inode: bytes mapped from the area's start (the doorbell's page is mapped alone too)
        starts = {s * unit: ("ring", s) for s in range(size)}
        starts[size * unit] = ("area", None)
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split()
                if len(fields) < 6 or not fields[5].startswith("/dev/shm/"):
                    continue
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                offset, inode = int(fields[2], 16), int(fields[4])
                # The kernel may merge adjacent mappings of one file: look for every unit inside this one.
                for at, (kind, sender) in starts.items():
                    if offset <= at < offset + (hi - lo):
                        if kind == "ring":
                            self.rings[(inode, sender)] = lo + at - offset
                        elif hi - (lo + at - offset) > area_extent.get(inode, 0):
                            self.areas[inode] = lo + at - offset
                            area_extent[inode] = hi - self.areas[inode]
        # This rank's own segment holds the rings of the other senders.
        own = {inode for (inode, sender) in self.rings if sender != rank}
        assert len(own) == 1 and len(self.areas) == size, (own, self.rings, self.areas)
        self.own = own.pop()

    def ring(self, sender):
        """The control page of the ring sender -> this rank."""
        return self.rings[(self.own, sender)]

    def own_area(self):
        return self.areas[self.own]

    def own_slots(self):
        """This rank's two slots (address, bytes): what the collectives that copy through them last wrote."""
        slot_bytes = min(self.ring_bytes, MAX_SLOT_BYTES)
        return [(self.own_area() + PAGE + parity * slot_bytes, slot_bytes) for parity in (0, 1)]


def load(addr, nbytes):
    return int.from_bytes(ctypes.string_at(addr, nbytes), "little")


def store(addr, nbytes, value):
    if nbytes == 8:
        ctypes.c_uint64.from_address(addr).value = value & (2**64 - 1)
    elif nbytes == 4:
        ctypes.c_uint32.from_address(addr).value = value & (2**32 - 1)
    else:
        ctypes.memmove(addr, value, nbytes)
