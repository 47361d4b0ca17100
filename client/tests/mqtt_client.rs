//! `client::mqtt` against a scripted broker on an in-process pipe: what the real broker's
//! tests (`broker/tests/mqtt_client.rs`) cannot pin down, the keep alive on paused time and
//! the receiver's side of the QoS 2 handshake when a PUBLISH comes twice.

use std::time::Duration;

use anyhow::{bail, Result};
use bytes::BytesMut;
use client::mqtt::{MqttClient, MqttOptions, QoS, Version};
use protocol::mqtt::{Codec, Connack, Limits, Packet, PubAck, Publish};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

/// The broker's end of the pipe.
struct Broker {
    stream: DuplexStream,
    codec: Codec,
    buf: BytesMut,
}

impl Broker {
    async fn next(&mut self) -> Result<Packet> {
        loop {
            if let Some(packet) = self.codec.decode(&mut self.buf)? {
                return Ok(packet);
            }
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                bail!("the client closed the connection");
            }
        }
    }

    async fn send(&mut self, packet: Packet) -> Result<()> {
        let mut out = BytesMut::new();
        self.codec.encode(&packet, &mut out)?;
        self.stream.write_all(&out).await?;
        Ok(())
    }
}

/// A client connected through a pipe to a scripted broker that accepted its CONNECT.
async fn connected(options: MqttOptions) -> Result<(MqttClient, Broker)> {
    let (client_end, broker_end) = tokio::io::duplex(64 * 1024);
    let mut broker =
        Broker { stream: broker_end, codec: Codec::new(Limits::default()), buf: BytesMut::new() };
    let client = tokio::spawn(MqttClient::connect_stream(client_end, options));
    let Packet::Connect(connect) = broker.next().await? else { bail!("expected CONNECT") };
    assert!(!connect.client_id.is_empty(), "a generated client id");
    broker.send(Packet::Connack(Connack::default())).await?;
    Ok((client.await??, broker))
}

#[tokio::test(start_paused = true)]
async fn keep_alive_sends_pingreq_and_gives_up_on_a_silent_broker() -> Result<()> {
    let options = MqttOptions { keep_alive: Duration::from_secs(10), ..MqttOptions::default() };
    let (client, mut broker) = connected(options).await?;
    // Nothing sent for the keep-alive interval: a PINGREQ (paused time runs on).
    assert_eq!(broker.next().await?, Packet::Pingreq);
    broker.send(Packet::Pingresp).await?;
    assert_eq!(broker.next().await?, Packet::Pingreq);
    // No PINGRESP this time: the client closes within another interval.
    let mut rest = Vec::new();
    broker.stream.read_to_end(&mut rest).await?;
    let error = client.recv(Duration::from_secs(1)).await.expect_err("the connection is gone");
    assert!(matches!(error, client::ClientError::Closed), "{error}");
    Ok(())
}

#[tokio::test]
async fn a_qos2_publish_sent_twice_is_handed_out_once() -> Result<()> {
    let options = MqttOptions { version: Version::V5_0, ..MqttOptions::default() };
    let (client, mut broker) = connected(options).await?;
    let publish =
        Publish { qos: QoS::ExactlyOnce, packet_id: Some(7), ..Publish::new("a/b", "once") };
    broker.send(Packet::Publish(publish.clone())).await?;
    assert_eq!(broker.next().await?, Packet::Pubrec(PubAck::new(7)));
    // The broker did not see the PUBREC and sends again, marked dup.
    broker.send(Packet::Publish(Publish { dup: true, ..publish })).await?;
    assert_eq!(broker.next().await?, Packet::Pubrec(PubAck::new(7)));
    broker.send(Packet::Pubrel(PubAck::new(7))).await?;
    assert_eq!(broker.next().await?, Packet::Pubcomp(PubAck::new(7)));
    let message = client.recv(Duration::from_secs(5)).await?.expect("the message");
    assert_eq!((&message.payload[..], message.qos), (&b"once"[..], QoS::ExactlyOnce));
    assert_eq!(client.recv(Duration::from_millis(100)).await?, None, "handed out once");
    // A QoS 1 publish of ours is confirmed by its PUBACK.
    let confirmation = client.publish("c/d", "x", QoS::AtLeastOnce, false).await?;
    let Packet::Publish(sent) = broker.next().await? else { bail!("expected PUBLISH") };
    let id = sent.packet_id.expect("a packet id");
    broker.send(Packet::Puback(PubAck::new(id))).await?;
    confirmation.wait().await?;
    client.disconnect().await?;
    assert!(matches!(broker.next().await?, Packet::Disconnect(_)));
    Ok(())
}
