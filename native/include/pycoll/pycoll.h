/* pycoll's C ABI: include this one header. */
#ifndef PYCOLL_H
#define PYCOLL_H
#include "pycoll/types.h"
#include "pycoll/ids.h"
#include "pycoll/kernels.h"
#include "pycoll/row_norm.h"
#include "pycoll/p2p.h"
#include "pycoll/algorithms.h"
#include "pycoll/comm.h"
#include "pycoll/call.h"
#include "pycoll/transports.h"
#include "pycoll/bootstrap.h"
#include "pycoll/settings.h"
#endif
