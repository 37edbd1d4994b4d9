//! The IPMI sampler against a real BMC simulator (`OpenIPMI`'s `ipmi_sim`) on
//! loopback, read through `ipmitool -I lanplus`. See `support/mod.rs` for
//! how the simulator is set up. Skipped, loudly, when `ipmi_sim` or
//! `ipmitool` is not installed (set `NESSIE_REQUIRE_TOOLS=1` to fail
//! instead).
//!
//! Timing: the simulator is time-driven (the test changes the power at
//! some instant, the simulator picks it up within its 100 ms poll, the
//! sampler reads on its own schedule), so energy can only be checked
//! within a tolerance. The trapezoid rule smears a step change over the
//! sampling interval in which it falls (at most interval/2 × ΔP), the poll
//! adds up to 0.1 s × ΔP, and a loaded machine can delay single readings.
//! With 4 readings a second and a 100 W step, that is ≤ 25 J against a
//! 600 J total; the tolerance is 60 J (10%) so that a busy CI machine does
//! not make the test flaky. The readings themselves are exact and are
//! checked exactly.

mod support;

use std::time::{Duration, Instant};

use power_ipmi::{
    EnergyReport, EnergySampler, IpmiConfig, IpmiReport, IpmiSampler, IpmiTool, PowerError,
    PowerSource,
};
use support::{Simulator, POWER, PSU2, TEMP};

fn sampler(sim: &Simulator, source: PowerSource, interval_ms: u64) -> IpmiSampler {
    let mut config = IpmiConfig::lan(sim.lan());
    config.source = source;
    config.interval = Duration::from_millis(interval_ms);
    IpmiSampler::new(config)
}

fn ipmi(report: EnergyReport) -> IpmiReport {
    match report {
        EnergyReport::Ipmi(r) => r,
        other => panic!("not an IPMI report: {other:?}"),
    }
}

/// Runs 100 W for 2 s then 200 W for 2 s and checks the integral.
fn step_run(sim: &Simulator, mut s: IpmiSampler) -> IpmiReport {
    sim.set(POWER, 100.0);
    sim.wait_for(POWER, 100.0);
    s.start().expect("start");
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    sim.set(POWER, 200.0);
    let switch = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(2));
    let r = ipmi(s.stop().expect("stop"));

    // Every reading is one of the two values set, both appear, in order.
    let watts: Vec<f64> = r.trace.samples().iter().map(|p| p.watts).collect();
    assert!(
        watts.iter().all(|&w| w == 100.0 || w == 200.0),
        "readings {watts:?}"
    );
    assert_eq!(watts.first(), Some(&100.0), "readings {watts:?}");
    assert_eq!(watts.last(), Some(&200.0), "readings {watts:?}");
    assert!(watts.windows(2).all(|w| w[0] <= w[1]), "readings {watts:?}");
    assert_eq!((r.min_watts, r.max_watts), (100.0, 200.0));
    assert!(r.samples >= 6, "only {} readings in 4 s at 4 Hz", r.samples);

    // The energy over the covered span, had the sampler seen the step
    // exactly when the test made it (the sampler's clock starts a moment
    // before `t0`; that offset is part of the tolerance).
    let expected = 100.0 * switch + 200.0 * (r.covered_s - switch);
    eprintln!(
        "{}: {} readings over {:.3} s, {:.1} J integrated, {expected:.1} J expected",
        r.source, r.samples, r.covered_s, r.joules
    );
    assert!(
        (r.joules - expected).abs() <= 60.0,
        "integrated {:.1} J, expected {expected:.1} J ± 60 J (covered {:.2} s, switch at {switch:.2} s, trace {:?})",
        r.joules,
        r.covered_s,
        r.trace.samples()
    );
    assert!(r.covered_s > 3.5 && r.covered_s <= r.elapsed_s);
    assert!((r.joules / r.covered_s - r.mean_watts).abs() < 1e-9);
    r
}

#[test]
fn sensor_energy_matches_the_power_set_in_the_simulator() {
    let Some(sim) = Simulator::start(
        "sensor_energy_matches_the_power_set_in_the_simulator",
        &[POWER],
        false,
    ) else {
        return;
    };
    let r = step_run(
        &sim,
        sampler(&sim, PowerSource::Sensors(vec![POWER.name.into()]), 250),
    );
    assert_eq!(r.source, "sensor:Pwr Consumption");
    assert_eq!(r.failed_samples, 0, "{:?}", r.last_error);
}

#[test]
fn auto_falls_back_to_the_sensor_when_the_bmc_has_no_dcmi() {
    let test = "auto_falls_back_to_the_sensor_when_the_bmc_has_no_dcmi";
    let Some(sim) = Simulator::start(test, &[POWER, TEMP], false) else {
        return;
    };
    // The stock simulator rejects DCMI: a DCMI-only sampler cannot start...
    let mut dcmi = sampler(&sim, PowerSource::Dcmi, 250);
    match dcmi.start() {
        Err(PowerError::DcmiUnsupported { detail }) => {
            assert!(detail.contains("Invalid command"), "{detail}");
        }
        other => panic!("expected DcmiUnsupported, got {other:?}"),
    }
    // ... and Auto finds the one sensor reading in Watts (not the
    // temperature sensor) by itself.
    sim.set(POWER, 150.0);
    sim.set(TEMP, 25.0);
    sim.wait_for(POWER, 150.0);
    let mut auto = sampler(&sim, PowerSource::Auto { sensors: vec![] }, 250);
    auto.start().expect("start");
    std::thread::sleep(Duration::from_millis(600));
    let r = ipmi(auto.stop().expect("stop"));
    assert_eq!(r.source, "sensor:Pwr Consumption");
    assert!(r.trace.samples().iter().all(|p| p.watts == 150.0));
    assert!(r.samples >= 2);
}

#[test]
fn idle_baseline_is_subtracted() {
    let Some(sim) = Simulator::start("idle_baseline_is_subtracted", &[POWER], false) else {
        return;
    };
    let mut s = sampler(&sim, PowerSource::Sensors(vec![POWER.name.into()]), 200);
    sim.set(POWER, 80.0);
    sim.wait_for(POWER, 80.0);
    let idle = s.measure_idle(Duration::from_secs(1)).expect("idle");
    // Mean power is Joules over seconds: equal to the reading up to rounding.
    assert!((idle.watts - 80.0).abs() < 1e-9, "{idle:?}");
    assert!(idle.samples >= 2);
    assert_eq!(s.config().idle_watts, Some(idle.watts));

    sim.set(POWER, 130.0);
    sim.wait_for(POWER, 130.0);
    s.start().expect("start");
    std::thread::sleep(Duration::from_secs(1));
    let r = ipmi(s.stop().expect("stop"));
    assert_eq!(r.idle_watts, Some(idle.watts));
    assert!(
        (r.above_idle_watts.expect("above idle") - 50.0).abs() < 1e-9,
        "{r:?}"
    );
    let above = r.above_idle_joules.expect("above idle");
    assert!((above - 50.0 * r.covered_s).abs() < 1e-6, "{above} J");
    let per_op = EnergyReport::Ipmi(r).per_operation(1000).expect("per op");
    assert!((per_op.above_idle_joules.unwrap() * 1000.0 - above).abs() < 1e-6);
}

#[test]
fn sensor_errors_are_typed() {
    let Some(sim) = Simulator::start("sensor_errors_are_typed", &[POWER, PSU2, TEMP], false) else {
        return;
    };
    sim.set(POWER, 100.0);
    sim.set(PSU2, 60.0);
    sim.set(TEMP, 30.0);
    sim.wait_for(PSU2, 60.0);
    sim.wait_for(TEMP, 30.0);
    let tool = IpmiTool::lan(sim.lan());

    // Two sensors read in Watts: Auto will not guess.
    let mut auto = sampler(&sim, PowerSource::Auto { sensors: vec![] }, 250);
    match auto.start() {
        Err(PowerError::AmbiguousPowerSensors { found }) => {
            assert_eq!(found, ["Pwr Consumption", "PS2 Input Power"]);
        }
        other => panic!("expected AmbiguousPowerSensors, got {other:?}"),
    }
    // Naming both sums them.
    let both = vec![POWER.name.to_owned(), PSU2.name.to_owned()];
    sim.wait_for(POWER, 100.0);
    assert_eq!(tool.sensors_watts(&both).expect("sum"), 160.0);
    let mut summed = sampler(&sim, PowerSource::Auto { sensors: both }, 250);
    summed.start().expect("start");
    let r = ipmi(summed.stop().expect("stop"));
    assert_eq!(r.source, "sensor:Pwr Consumption+PS2 Input Power");
    assert!(r.trace.samples().iter().all(|p| p.watts == 160.0));

    match tool.sensors_watts(&[TEMP.name.to_owned()]) {
        Err(PowerError::NotWatts { sensor, unit }) => {
            assert_eq!(sensor, "Inlet Temp");
            assert_eq!(unit, "degrees C");
        }
        other => panic!("expected NotWatts, got {other:?}"),
    }
    match tool.sensors_watts(&["No Such Sensor".to_owned()]) {
        Err(PowerError::SensorNotFound { sensor }) => assert_eq!(sensor, "No Such Sensor"),
        other => panic!("expected SensorNotFound, got {other:?}"),
    }

    let mut wrong = sim.lan();
    wrong.password = "not-the-password".into();
    let mut bad = IpmiSampler::new(IpmiConfig::lan(wrong));
    match bad.start() {
        Err(PowerError::ToolFailed {
            command, output, ..
        }) => {
            assert!(!command.contains("not-the-password"), "{command}");
            assert!(!output.is_empty());
        }
        other => panic!("expected ToolFailed, got {other:?}"),
    }
}

#[test]
fn dcmi_energy_matches_the_power_set_in_the_simulator() {
    let test = "dcmi_energy_matches_the_power_set_in_the_simulator";
    let Some(sim) = Simulator::start(test, &[POWER], true) else {
        return;
    };
    // With the DCMI module loaded, Auto prefers DCMI over the sensor.
    let r = step_run(
        &sim,
        sampler(&sim, PowerSource::Auto { sensors: vec![] }, 250),
    );
    assert_eq!(r.source, "dcmi");
    assert_eq!(r.failed_samples, 0, "{:?}", r.last_error);
    let reading = IpmiTool::lan(sim.lan()).dcmi_power_reading().expect("dcmi");
    assert_eq!((reading.watts, reading.active), (200.0, Some(true)));
}
