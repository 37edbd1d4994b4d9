/*
 * A test module for OpenIPMI's ipmi_sim (loaded with `loadlib` in lan.conf):
 * answers DCMI Get Power Reading (NetFn 2Ch, group extension DCh, command
 * 02h) with the number of Watts found in the file named by the module's
 * init string. Every other DCMI command gets "invalid command" (C1h).
 *
 * The stock simulator implements no DCMI; this is the smallest addition
 * that lets `ipmitool dcmi power reading` be tested against a real IPMI
 * stack (RMCP+, sessions, message framing) rather than canned text.
 */
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <OpenIPMI/serv.h>
#include <OpenIPMI/mcserv.h>

#define DCMI_GROUP 0xdc
#define DCMI_GET_POWER_READING 0x02

static char watts_file[4096];

static void put16(unsigned char *p, unsigned int v)
{
    p[0] = v & 0xff;
    p[1] = (v >> 8) & 0xff;
}

static void put32(unsigned char *p, uint32_t v)
{
    put16(p, v & 0xffff);
    put16(p + 2, v >> 16);
}

static void handle_dcmi(lmc_data_t *mc, msg_t *msg, unsigned char *rdata,
                        unsigned int *rdata_len, void *cb_data)
{
    unsigned long watts = 0;
    FILE *f;

    (void) mc;
    (void) cb_data;
    if (msg->cmd != DCMI_GET_POWER_READING) {
        rdata[0] = 0xc1; /* invalid command */
        *rdata_len = 1;
        return;
    }
    f = fopen(watts_file, "r");
    if (!f || fscanf(f, "%lu", &watts) != 1 || watts > 0xffff) {
        if (f)
            fclose(f);
        rdata[0] = 0xcb; /* requested data not present */
        *rdata_len = 1;
        return;
    }
    fclose(f);
    rdata[0] = 0x00;                /* completion code */
    rdata[1] = DCMI_GROUP;
    put16(rdata + 2, watts);        /* current */
    put16(rdata + 4, watts);        /* minimum over the sampling period */
    put16(rdata + 6, watts);        /* maximum */
    put16(rdata + 8, watts);        /* average */
    put32(rdata + 10, (uint32_t) time(NULL));
    put32(rdata + 14, 1000);        /* sampling period, ms */
    rdata[18] = 0x40;               /* power measurement active */
    *rdata_len = 19;
}

int ipmi_sim_module_print_version(sys_data_t *sys, const char *initstr)
{
    (void) sys;
    (void) initstr;
    printf("nessie-rs DCMI power reading test module\n");
    return 0;
}

int ipmi_sim_module_init(sys_data_t *sys, const char *initstr)
{
    (void) sys;
    if (!initstr || strlen(initstr) >= sizeof(watts_file))
        return 22; /* EINVAL */
    strcpy(watts_file, initstr);
    ipmi_emu_register_group_extension_handler(DCMI_GROUP, handle_dcmi, NULL);
    return 0;
}
