/* um-cpu-levels — prints, one per line, every CPU code path level that
 * run-time dispatch can pick on this machine (scalar up to what it has), so
 * the test script can run the numeric tests once per level (UM_CPU_ISA). */
#include <stdio.h>

#include "um-cpu-isa.h"

int
main (void)
{
  UmCpuIsa top = um_cpu_isa_detected ();

  for (int i = UM_ISA_SCALAR; i <= (int) top; i++)
    printf ("%s\n", um_cpu_isa_name ((UmCpuIsa) i));
  return 0;
}
