/* ddl.c: placeholder until DDL capture lands. */
#include "tashkent.h"

void
tk_ddl_init(void)
{
}
