/* um-cpu-levels — prints, one per line, every CPU code path level that
 * run-time dispatch can pick on this machine (every level it has, from
 * scalar up; a CPU with AVX-512 may lack AVX-VNNI), so the test script can
 * run the numeric tests once per level (UM_CPU_ISA). */
#include <stdio.h>

#include "um-cpu-isa.h"

int
main (void)
{
  for (int i = UM_ISA_SCALAR; i < UM_ISA_N_LEVELS; i++)
    if (um_cpu_isa_supported ((UmCpuIsa) i))
      printf ("%s\n", um_cpu_isa_name ((UmCpuIsa) i));
  return 0;
}
