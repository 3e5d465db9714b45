/* A program built against the installed Hermod: prints an error string and
 * the protocols compiled in. */
#include <stdio.h>

#include <hermod.h>

int main(void)
{
    const char *const *protos = hm_protocol_list();

    printf("hermod %s\n", HM_VERSION_STRING);
    printf("hm_strerror(HM_TIMEOUT) = %s\n", hm_strerror(HM_TIMEOUT));
    printf("protocols:");
    for (size_t i = 0; protos != NULL && protos[i] != NULL; i++)
        printf(" %s", protos[i]);
    printf("\n");
    return 0;
}
