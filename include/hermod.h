/*
 * Hermod: remote procedure calls and bulk data transfer for HPC jobs.
 * Users include only this header.
 */
#ifndef HERMOD_H
#define HERMOD_H

#include <hermod/types.h>
#include <hermod/proc.h>
#include <hermod/core.h>
#include <hermod/bulk.h>
#include <hermod/topo.h>
#include <hermod/group.h>

#endif /* HERMOD_H */
